// Package acl is Apogee's access control: users, RocketMQ 5.3's policy
// model, the permission every request code needs, and the Guard a front
// end asks before it serves a request.
//
// # Model (RocketMQ 5.3)
//
// A User has an access key (username), a secret key (password), a type
// (Super: every request allowed once authenticated; Normal) and a status.
// An ACL gives a user policies of two types, Custom and Default, each a
// list of entries: a resource pattern ("Topic:orders", "Topic:orders*",
// "Topic:*", "Group:...", "Cluster:...", or "*"), actions (Pub, Sub,
// Create, Update, Delete, Get, List, All), optional source addresses (IP,
// CIDR) and a decision (Allow or Deny).
//
// A request needs one or more checks (an action set on a resource; the
// table in codes.go, listed in docs/security.md). Each check is decided by
// the user's Custom entries that match its resource, one of its actions
// and the source address; when none matches, by the Default entries; when
// none of those matches either, it is refused. Of the matching entries the
// most specific decide (a literal name, then the longest prefix, then
// Type:*, then *), and among equally specific ones a Deny wins. Every
// check must pass. Codes the table does not list need Update on the
// cluster (admin rights).
//
// # Sources of rules
//
//   - The ACL file (Options.File): the project's format (YAML or JSON with
//     users and acls shaped as RocketMQ 5.3's UserInfo and AclInfo bodies)
//     or RocketMQ 4's plain_acl.yml (accounts), told apart by their keys
//     (ParseFile). It is checked every ReloadInterval and reloaded when it
//     changed; a change that does not parse is logged (once per version
//     of the file and ReloadErrorLogInterval, the failed checks counted)
//     and the rules in force stay. Users and ACLs it defines are the
//     file's own.
//   - The initial users (Options.InitUsers: RocketMQ 5.3's
//     initAuthenticationUser and innerClientAuthenticationCredentials):
//     created in the store as super users at Open when no user of their
//     name exists, never changed afterwards by Open; their passwords are
//     never logged.
//   - The admin codes (ServeAdmin, RocketMQ 5.3's 3001-3010): users and
//     ACLs kept in Options.Dir/acl.json, their secrets encrypted with the
//     key in acl.key (see store.go); a name the file defines cannot be
//     changed this way.
//
// # Invariants
//
//   - Check reads one immutable snapshot (an atomic pointer) and allocates
//     nothing when it allows a request whose checks come from header
//     fields (every code on the message path). The names of its checks
//     are views of the request, valid during the call only.
//   - Reloads and admin changes are serialised by Guard.mu and publish a
//     new snapshot; a request sees the rules before or after a change,
//     never a mix.
//   - A refusal answers NO_PERMISSION (16) with a remark naming the user,
//     the resource and the actions refused; it is logged (at most 10 lines
//     a second, the rest counted) without the secret or the signature.
package acl
