package agent

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/tenurehq/tenure/gossip"
)

// errNoPeerAddr is the failure of a message to a member that gossip lists
// without a peer address.
var errNoPeerAddr = errors.New("no peer address: gossip lists the member without one")

// errBadReply is the failure of a call whose answer does not decode.
var errBadReply = errors.New("bad reply")

// maxCause bounds a failure's cause as status and logs show it.
const maxCause = 120

// peerCause reduces a failed peer call to its cause, in a few words:
// "connection refused", "i/o timeout while connecting", "TLS handshake
// failed: the peers share no cluster key". A timeout says whether the
// connection (its TCP connect or TLS handshake) was not made in time, so
// the request never went out (a host that drops packets, or a peer too
// loaded to finish a handshake), or the request went out on a connection
// and no reply came in time (a stuck peer process, or a network that
// stopped carrying a connection made before). The full error goes to the
// debug log.
func peerCause(err error) string {
	var remote *gossip.RemoteError
	var errno syscall.Errno
	var dns *net.DNSError
	switch {
	case err == nil:
		return "unknown error"
	case errors.As(err, &remote):
		return clip("it answered with an error: " + remote.Message)
	case isTimeout(err) && errors.Is(err, gossip.ErrUnreachable):
		return "i/o timeout while connecting"
	case isTimeout(err):
		return "i/o timeout waiting for the reply"
	case errors.Is(err, gossip.ErrPeerAuthentication) && strings.Contains(err.Error(), "share no"):
		return "TLS handshake failed: the peers share no cluster key"
	case errors.Is(err, gossip.ErrPeerAuthentication):
		return "TLS handshake failed"
	case errors.As(err, &errno):
		return errno.Error()
	case errors.As(err, &dns):
		return clip("cannot resolve " + dns.Name)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed by the peer"
	}
	return clip(err.Error())
}

// isTimeout reports whether err is a deadline that passed.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) ||
		(errors.As(err, &ne) && ne.Timeout())
}

// clip cuts s to maxCause bytes (at a rune boundary).
func clip(s string) string {
	if len(s) <= maxCause {
		return s
	}
	cut := maxCause
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
