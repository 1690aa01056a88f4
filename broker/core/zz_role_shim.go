package core

// TEMPORARY shim until the role helper lands core.SetRole (delete before merge).
func (c *Core) SetRole(r Role) error { panic("shim") }
func (c *Core) Role() Role {
	if c.slave {
		return RoleSlave
	}
	return c.opts.Role
}
