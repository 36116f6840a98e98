package extproc

import (
	"fmt"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
)

// BodyMode is how Envoy sends bodies to the picker.
type BodyMode int

// The body modes the picker serves.
const (
	FullDuplex BodyMode = iota // FULL_DUPLEX_STREAMED: what GIE requires
	Buffered                   // BUFFERED: older Envoy Gateway setups
)

// ParseBodyMode reads "full-duplex" or "buffered".
func ParseBodyMode(s string) (BodyMode, error) {
	switch s {
	case "full-duplex", "full_duplex_streamed", "FULL_DUPLEX_STREAMED":
		return FullDuplex, nil
	case "buffered", "BUFFERED":
		return Buffered, nil
	}
	return 0, fmt.Errorf("body mode %q is not supported: use full-duplex (GIE's FULL_DUPLEX_STREAMED) or buffered", s)
}

func (m BodyMode) envoy() filterv3.ProcessingMode_BodySendMode {
	if m == Buffered {
		return filterv3.ProcessingMode_BUFFERED
	}
	return filterv3.ProcessingMode_FULL_DUPLEX_STREAMED
}

func (m BodyMode) String() string {
	if m == Buffered {
		return "buffered"
	}
	return "full-duplex"
}

// readsBody reports whether the picker reads the request body in mode m before routing:
// FULL_DUPLEX_STREAMED and BUFFERED (and BUFFERED_PARTIAL). In any other mode (NONE,
// STREAMED, or one added to Envoy after this build) it routes at the headers.
func readsBody(m filterv3.ProcessingMode_BodySendMode) bool {
	switch m {
	case filterv3.ProcessingMode_FULL_DUPLEX_STREAMED, filterv3.ProcessingMode_BUFFERED, filterv3.ProcessingMode_BUFFERED_PARTIAL:
		return true
	}
	return false
}
