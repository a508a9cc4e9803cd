package clustermap

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/url"
	"strings"

	"github.com/cairnfs/cairn/internal/errors"
)

// Link is a multi-data-center replication link to another cairn cluster (cairn mdc link;
// docs/design/mdc.md). Both clusters define a link of the same name and secret; each
// side's Send says whether it stacks and sends its own changes to the other.
type Link struct {
	Name string `json:"name"`
	// Endpoint is the base URL of the remote cluster's S3 listener (http or https), where
	// its link endpoint is.
	Endpoint string `json:"endpoint"`
	// Secret is the link secret, sealed by the secret store (package secrets, purpose
	// "mdc-link", named by the link). The map never holds it in the clear.
	Secret string `json:"secret"`
	// Buckets are the buckets the link replicates (empty: every bucket).
	Buckets []string `json:"buckets,omitempty"`
	// Send: this cluster stacks its changes for the link and sends them; false for the
	// receiving end of a one-way link (it still accepts the remote's changes and answers
	// its investigations).
	Send bool `json:"send"`
	// Paused links stack their changes and send nothing until resumed.
	Paused bool `json:"paused,omitempty"`
	// Remote is the remote cluster's id, as it answered when the link was made ("": it
	// had no link of this name yet).
	Remote string `json:"remote,omitempty"`
	// CA is PEM CA certificates the remote's https endpoint certificate is verified
	// against instead of the system's roots (cairn mdc link --endpoint-ca-file; a private
	// CA). Empty: the system's roots.
	CA string `json:"ca,omitempty"`
}

// Replicates reports whether the link carries bucket's changes.
func (l *Link) Replicates(bucket string) bool {
	if len(l.Buckets) == 0 {
		return true
	}
	for _, b := range l.Buckets {
		if b == bucket {
			return true
		}
	}
	return false
}

// The link commands (feature level 9).
//
//   - OpPutLink (Link, ClusterID): creates or replaces a link. ClusterID, if the map has
//     no cluster id yet, becomes it (the origin id the cluster's changes carry). Invalid
//     if the name is not 1-64 letters, digits, '-', '_' or '.', if the endpoint is not an
//     http or https URL, or if the secret is not sealed.
//   - OpRemoveLink (Name): removes a link; NotExist if absent. Changes stacked for it
//     are dropped by the nodes that hold them.
//   - OpPauseLink, OpResumeLink (Name): pause a link (its changes are stacked, not sent)
//     or resume it; NotExist if absent.
const (
	OpPutLink    = "put_link"
	OpRemoveLink = "remove_link"
	OpPauseLink  = "pause_link"
	OpResumeLink = "resume_link"
)

func validateLink(l *Link) error {
	switch {
	case l == nil:
		return errors.E(opFSM, errors.Invalid, "put_link: missing link")
	case !ValidTargetName(l.Name):
		return errors.Errorf(opFSM, errors.Invalid, "link name %q: 1-64 letters, digits, '-', '_' or '.'", l.Name)
	case !strings.HasPrefix(l.Secret, "v1."):
		return errors.Errorf(opFSM, errors.Invalid, "link %s: its secret is not sealed", l.Name)
	}
	u, err := url.Parse(l.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.Errorf(opFSM, errors.Invalid, "link %s: endpoint %q is not an http or https URL", l.Name, l.Endpoint)
	}
	if l.CA != "" {
		if u.Scheme != "https" {
			return errors.Errorf(opFSM, errors.Invalid, "link %s: a CA for endpoint %q, which is not https", l.Name, l.Endpoint)
		}
		if _, err := LinkCAPool(l.CA); err != nil {
			return errors.E(opFSM, errors.Invalid, err)
		}
	}
	return nil
}

func applyLinkCommand(nm *Map, c Command) error {
	switch c.Op {
	case OpPutLink:
		if err := validateLink(c.Link); err != nil {
			return err
		}
		if nm.ClusterID == "" {
			if !ValidTargetName(c.ClusterID) {
				return errors.E(opFSM, errors.Invalid, "put_link: the map has no cluster id and the command gives none")
			}
			nm.ClusterID = c.ClusterID
		}
		ls := make(map[string]Link, len(nm.Links)+1)
		for k, v := range nm.Links {
			ls[k] = v
		}
		ls[c.Link.Name] = *c.Link
		nm.Links = ls
	case OpPauseLink, OpResumeLink:
		l, ok := nm.Links[c.Name]
		if !ok {
			return errors.Errorf(opFSM, errors.NotExist, "no link %q", c.Name)
		}
		l.Paused = c.Op == OpPauseLink
		ls := make(map[string]Link, len(nm.Links))
		for k, v := range nm.Links {
			ls[k] = v
		}
		ls[c.Name] = l
		nm.Links = ls
	case OpRemoveLink:
		if _, ok := nm.Links[c.Name]; !ok {
			return errors.Errorf(opFSM, errors.NotExist, "no link %q", c.Name)
		}
		ls := make(map[string]Link, len(nm.Links))
		for k, v := range nm.Links {
			if k != c.Name {
				ls[k] = v
			}
		}
		if len(ls) == 0 {
			ls = nil
		}
		nm.Links = ls
	}
	return nil
}

// LinkCAPool parses a link's CA (PEM certificates) into a pool; an error if it holds
// no certificate or one that does not parse.
func LinkCAPool(pemCerts string) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	rest := []byte(pemCerts)
	n := 0
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, errors.E(errors.Invalid, fmt.Errorf("a link's CA certificate does not parse: %w", err))
		}
		pool.AddCert(c)
		n++
	}
	if n == 0 {
		return nil, errors.E(errors.Invalid, "a link's CA holds no PEM certificate")
	}
	return pool, nil
}
