package clustermap

import (
	"maps"
	"regexp"

	"github.com/cairnfs/cairn/internal/errors"
)

// NBDClient is the record of an NBD client certificate the cluster CA issued (cairn
// volume client-cert; docs/design/volumes.md, "NBD over TLS"), kept so that it can be
// listed and revoked: every NBD listener refuses a revoked certificate at its TLS
// handshake. A record is dropped once its certificate has expired (a listener refuses
// an expired certificate anyway).
type NBDClient struct {
	Serial  string   `json:"serial"` // the certificate's serial number, lower-case hex
	Name    string   `json:"name,omitempty"`
	Volumes []string `json:"volumes,omitempty"`
	// Issued, NotAfter and Revoked are unix nanoseconds; NotAfter 0 for a certificate
	// revoked by serial without a record (issued before records were kept: kept until
	// revoked serials are cleared by hand, never by expiry), Revoked 0 while valid.
	Issued   int64 `json:"issued,omitempty"`
	NotAfter int64 `json:"not_after,omitempty"`
	Revoked  int64 `json:"revoked,omitempty"`
}

// The NBD client commands (feature level 10).
//
//   - OpIssueNBDClient (NBDClient): records an issued certificate (Serial, Name,
//     NotAfter and Issued set; Revoked 0). Exist if the serial is recorded; Invalid if a
//     field is missing or malformed; NoSpace past MaxNBDClients records.
//   - OpRevokeNBDClient (NBDClient: Serial or Name, and Revoked): revokes the
//     certificate of that serial (recording it if it was not: one issued before records
//     were kept) or every unexpired certificate recorded for that name (NotExist if
//     there is none). A certificate revoked already keeps its first revocation time.
//
// Both drop the records of certificates expired at the command's time (Issued, Revoked).
const (
	OpIssueNBDClient  = "issue_nbd_client"
	OpRevokeNBDClient = "revoke_nbd_client"
)

// MaxNBDClients bounds the records of unexpired NBD client certificates (the map is held
// in memory by every node and sent whole in snapshots).
const MaxNBDClients = 10000

var serialRE = regexp.MustCompile(`^[0-9a-f]{1,40}$`)

// ValidSerial checks a certificate serial as records hold it (lower-case hex, at most 20
// bytes as RFC 5280 allows).
func ValidSerial(s string) error {
	if !serialRE.MatchString(s) {
		return errors.Errorf("", errors.Invalid, "certificate serial %q: want lower-case hex digits (at most 40)", s)
	}
	return nil
}

// pruneNBDClients drops from cs the records of certificates expired at now.
func pruneNBDClients(cs map[string]NBDClient, now int64) {
	for s, c := range cs {
		if c.NotAfter != 0 && c.NotAfter < now {
			delete(cs, s)
		}
	}
}

func applyNBDClientCommand(nm *Map, c Command) error {
	r := c.NBDClient
	if r == nil {
		return errors.Errorf(opFSM, errors.Invalid, "%s: missing client", c.Op)
	}
	cs := maps.Clone(nm.NBDClients) // never modified in place
	if cs == nil {
		cs = map[string]NBDClient{}
	}
	switch c.Op {
	case OpIssueNBDClient:
		switch {
		case ValidSerial(r.Serial) != nil:
			return errors.E(opFSM, ValidSerial(r.Serial))
		case r.Name == "" || r.NotAfter <= 0 || r.Issued <= 0 || r.Revoked != 0:
			return errors.Errorf(opFSM, errors.Invalid, "issue_nbd_client %s: a record needs a name, issue and expiry times, and no revocation", r.Serial)
		}
		pruneNBDClients(cs, r.Issued)
		if _, ok := cs[r.Serial]; ok {
			return errors.Errorf(opFSM, errors.Exist, "issue_nbd_client: serial %s is recorded", r.Serial)
		}
		if len(cs) >= MaxNBDClients {
			return errors.Errorf(opFSM, errors.NoSpace, "issue_nbd_client: %d unexpired NBD client certificates are recorded (at most %d): revoke or let some expire", len(cs), MaxNBDClients)
		}
		v := *r
		v.Volumes = append([]string(nil), r.Volumes...)
		cs[r.Serial] = v
	case OpRevokeNBDClient:
		switch {
		case r.Revoked <= 0:
			return errors.E(opFSM, errors.Invalid, "revoke_nbd_client: missing revocation time")
		case (r.Serial == "") == (r.Name == ""):
			return errors.E(opFSM, errors.Invalid, "revoke_nbd_client: give a serial or a name")
		case r.Serial != "" && ValidSerial(r.Serial) != nil:
			return errors.E(opFSM, ValidSerial(r.Serial))
		}
		pruneNBDClients(cs, r.Revoked)
		if r.Serial != "" {
			v, ok := cs[r.Serial]
			if !ok {
				v = NBDClient{Serial: r.Serial}
			}
			if v.Revoked == 0 {
				v.Revoked = r.Revoked
			}
			cs[r.Serial] = v
			break
		}
		n := 0
		for s, v := range cs {
			if v.Name != r.Name {
				continue
			}
			n++
			if v.Revoked == 0 {
				v.Revoked = r.Revoked
				cs[s] = v
			}
		}
		if n == 0 {
			return errors.Errorf(opFSM, errors.NotExist, "revoke_nbd_client: no unexpired certificate is recorded for %q", r.Name)
		}
	}
	if len(cs) == 0 {
		cs = nil
	}
	nm.NBDClients = cs
	return nil
}

// NBDClientRevoked reports whether the certificate of serial is revoked, and its record.
func (m *Map) NBDClientRevoked(serial string) (NBDClient, bool) {
	c, ok := m.NBDClients[serial]
	return c, ok && c.Revoked != 0
}
