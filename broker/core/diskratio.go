package core

// DiskRatio is the used share (0..1) of the disk holding the data
// directory, as EngineStats and GET_BROKER_RUNTIME_INFO's
// commitLogDiskRatio report it (one statfs; 0 when it fails).
func (a Admin) DiskRatio() float64 {
	r, _, _ := diskSpace(a.c.opts.DataDir)
	return r
}
