package rpc

import (
	"errors"
	"strings"
)

// Error codes, as carried in Error.Code. They are stable: clients match on
// them, so a code is never renamed or reused. Each has one meaning and one
// effect on the connection (docs/PROTOCOL.md section 8): after the codes
// of the first group the server goes on serving the connection; after
// those of the second it closes it.
const (
	// Errors of one request; the connection stays open.
	CodeNoLeader        = "no_leader"
	CodeNotLeader       = "not_leader"
	CodeUnknownOp       = "unknown_op"
	CodeInvalidArgument = "invalid_argument"
	CodeNotFound        = "not_found"
	CodeTimeout         = "timeout"
	CodeLost            = "lost"
	CodeInternal        = "internal"

	// Errors after which the server closes the connection.
	CodeBadRequest         = "bad_request"
	CodeFrameTooLarge      = "frame_too_large"
	CodeUnsupportedVersion = "unsupported_version"
	CodeBusy               = "too_many_connections"
	CodeShuttingDown       = "shutting_down"
	CodeTooSlow            = "too_slow"
)

// keepsOpen reports whether the server goes on serving a connection after
// an error with code. For a code this package does not know it says false:
// a client should not count on a connection that may be closing.
func keepsOpen(code string) bool {
	switch code {
	case CodeNoLeader, CodeNotLeader, CodeUnknownOp, CodeInvalidArgument, CodeNotFound, CodeInternal:
		return true
	}
	return false
}

// Sentinel errors. Errors returned by the Client wrap one of them when the
// agent reported the matching code, so callers test with errors.Is. A Backend
// returns (an error wrapping) one of them to send its code.
var (
	// ErrNoLeader: no leader is known.
	ErrNoLeader = errors.New("rpc: no leader")
	// ErrNotLeader: the operation needs this node to lead, and it does not.
	ErrNotLeader = errors.New("rpc: not the leader")
	// ErrUnknownOp: the agent does not know the requested op (it may be
	// older than the client). The connection stays usable.
	ErrUnknownOp = errors.New("rpc: unknown op")
	// ErrInvalidArgument: the request was well-formed, but the agent
	// refuses it as asked: a value out of range or not allowed (an empty
	// name, a hold over the limit, a member that may not lead), or an
	// action its configuration does not allow. The connection stays
	// usable.
	ErrInvalidArgument = errors.New("rpc: invalid argument")
	// ErrBadRequest: a frame broke the protocol: it is not the msgpack map
	// of the documented keys and types the protocol wants where it was
	// sent, or it was sent where no frame is allowed. The agent closes the
	// connection.
	ErrBadRequest = errors.New("rpc: bad request")
	// ErrFrameTooLarge: a frame, in either direction, would exceed the
	// connection's frame limit (max_frame). The agent closes the
	// connection.
	ErrFrameTooLarge = errors.New("rpc: frame too large")
	// ErrUnsupportedVersion: the two sides speak no common protocol version.
	ErrUnsupportedVersion = errors.New("rpc: unsupported protocol version")
	// ErrShuttingDown: the agent is stopping.
	ErrShuttingDown = errors.New("rpc: agent shutting down")
	// ErrInternal: the agent could not carry out a valid request: it
	// failed itself (its log says why), or, for keys, some members failed
	// (the message names them).
	ErrInternal = errors.New("rpc: internal agent error")
	// ErrBusy: the agent serves too many connections already.
	ErrBusy = errors.New("rpc: too many connections")
	// ErrNotFound: the named thing (such as a voter) does not exist.
	ErrNotFound = errors.New("rpc: not found")
	// ErrTimeout: a named lease was not granted within the wait (or, tried
	// once, is held).
	ErrTimeout = errors.New("rpc: timed out")
	// ErrLost: a named lease was lost (not renewed in time).
	ErrLost = errors.New("rpc: lease lost")
	// ErrTooSlow: a watcher fell too far behind and its stream was ended.
	ErrTooSlow = errors.New("rpc: watcher too slow")
	// ErrAgentUnreachable: nothing answers at the socket path. Returned by
	// Dial (and by calls that must reconnect); never sent on the wire.
	ErrAgentUnreachable = errors.New("rpc: agent unreachable")
)

// knownCodes lists every code that maps to a sentinel, in the order the
// server tries them when it maps a Backend error to a code.
func knownCodes() []string {
	return []string{CodeNoLeader, CodeNotLeader, CodeUnknownOp, CodeInvalidArgument, CodeBadRequest,
		CodeFrameTooLarge, CodeUnsupportedVersion, CodeShuttingDown, CodeInternal, CodeBusy, CodeNotFound, CodeTooSlow, CodeTimeout, CodeLost}
}

// sentinel returns the sentinel error for code, or nil for an unknown code.
func sentinel(code string) error {
	switch code {
	case CodeNoLeader:
		return ErrNoLeader
	case CodeNotLeader:
		return ErrNotLeader
	case CodeUnknownOp:
		return ErrUnknownOp
	case CodeInvalidArgument:
		return ErrInvalidArgument
	case CodeBadRequest:
		return ErrBadRequest
	case CodeFrameTooLarge:
		return ErrFrameTooLarge
	case CodeUnsupportedVersion:
		return ErrUnsupportedVersion
	case CodeShuttingDown:
		return ErrShuttingDown
	case CodeInternal:
		return ErrInternal
	case CodeBusy:
		return ErrBusy
	case CodeNotFound:
		return ErrNotFound
	case CodeTooSlow:
		return ErrTooSlow
	case CodeTimeout:
		return ErrTimeout
	case CodeLost:
		return ErrLost
	}
	return nil
}

// Error is an error as it travels on the wire: a stable code and a message
// for people. The Client returns it for errors the agent reports; it wraps
// the sentinel error for its code.
type Error struct {
	// Code is one of the Code constants (or a newer code this package does
	// not know).
	Code string `msgpack:"code" json:"code"`
	// Message explains the error; it may be empty.
	Message string `msgpack:"message" json:"message"`
}

// Error returns the sentinel's text followed by the agent's message.
func (e *Error) Error() string {
	base := "rpc: agent error " + e.Code
	if s := sentinel(e.Code); s != nil {
		base = s.Error()
	}
	if e.Message == "" || e.Message == base {
		return base
	}
	return base + ": " + e.Message
}

// Unwrap returns the sentinel error for the code, or nil for an unknown code.
func (e *Error) Unwrap() error { return sentinel(e.Code) }

// newError builds an Error with code and message.
func newError(code, msg string) *Error { return &Error{Code: code, Message: msg} }

// wireError converts a Backend error to its wire form. ok is false when err
// wraps no sentinel: an internal error, whose text the caller logs but does
// not send. A no_leader error always carries a reason.
func wireError(err error) (*Error, bool) {
	e, ok := codeOf(err)
	if ok && e.Code == CodeNoLeader && e.Message == "" {
		e.Message = "no leader is known"
	}
	return e, ok
}

// codeOf finds the code err carries: an *Error's, or its sentinel's.
func codeOf(err error) (*Error, bool) {
	var e *Error
	if errors.As(err, &e) && sentinel(e.Code) != nil {
		return newError(e.Code, e.Message), true
	}
	for _, code := range knownCodes() {
		if s := sentinel(code); errors.Is(err, s) {
			return newError(code, trimSentinel(err.Error(), s)), true
		}
	}
	return nil, false
}

// trimSentinel drops a leading or trailing sentinel text from msg, since
// the client adds it back: "agent: no quorum: rpc: no leader" travels as
// "agent: no quorum", and "rpc: bad request: seq must be at least 1" as
// "seq must be at least 1".
func trimSentinel(msg string, s error) string {
	if msg == s.Error() {
		return ""
	}
	msg = strings.TrimPrefix(msg, s.Error()+": ")
	return strings.TrimSuffix(msg, ": "+s.Error())
}
