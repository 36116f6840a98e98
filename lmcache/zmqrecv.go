package lmcache

/*
#cgo !windows pkg-config: libzmq
#include <errno.h>
#include <string.h>
#include <zmq.h>

// lm_frame is what lm_recv_frame tells of the frame it received.
typedef struct {
	zmq_msg_t msg;  // the frame, while it waits for lm_take_frame
	int size;       // its length in bytes
	int more;       // whether more frames of the message follow
	char peer[64];  // its Peer-Address property when asked for and present, else ""
} lm_frame;

// lm_recv_frame receives one frame from socket s with flags and tells of it in f. A frame
// of at most cap bytes is copied to buf and released (0 returned); a longer one is kept in
// f->msg for lm_take_frame (1 returned). On a receive error it returns -1 with errno set.
// One call does what zmq4 needs five to six cgo calls for (init, recv, data, copy, close,
// and the more flag as a socket option).
static int lm_recv_frame(void *s, int flags, lm_frame *f, void *buf, int cap, int want_peer) {
	zmq_msg_init(&f->msg);
	int n = zmq_msg_recv(&f->msg, s, flags);
	if (n < 0) {
		int e = errno;
		zmq_msg_close(&f->msg);
		errno = e;
		return -1;
	}
	f->size = n;
	f->more = zmq_msg_more(&f->msg);
	f->peer[0] = 0;
	if (want_peer) {
		const char *p = zmq_msg_gets(&f->msg, "Peer-Address");
		if (p != NULL) {
			strncpy(f->peer, p, sizeof f->peer - 1);
			f->peer[sizeof f->peer - 1] = 0;
		}
	}
	if (n > cap) {
		return 1;
	}
	if (n > 0) {
		memcpy(buf, zmq_msg_data(&f->msg), n);
	}
	zmq_msg_close(&f->msg);
	return 0;
}

// lm_take_frame copies the frame lm_recv_frame kept in f to buf (f->size bytes) and
// releases it.
static void lm_take_frame(lm_frame *f, void *buf) {
	memcpy(buf, zmq_msg_data(&f->msg), f->size);
	zmq_msg_close(&f->msg);
}
*/
import "C"

import (
	"errors"
	"reflect"
	"syscall"
	"unsafe"

	zmq "github.com/pebbe/zmq4"
)

// receiver receives whole messages from one socket, one cgo call per frame (decision
// 1192). It belongs to the goroutine that serves the socket, which is also the one that
// closes it: the socket's C handle is used without zmq4's check that it is still open.
type receiver struct {
	so      *zmq.Socket
	handle  unsafe.Pointer
	f       *C.lm_frame // on the Go heap, which does not move; it holds no Go pointer
	scratch []byte      // a frame is received into it, then copied into a slice of its own
}

// scratchBytes is the receive buffer; a longer frame is taken in a second call.
const scratchBytes = 4096

// errNoHandle is returned when zmq4's Socket keeps its C handle elsewhere than this
// package reads it (a zmq4 version other than go.mod's).
var errNoHandle = errors.New("lmcache: the ZeroMQ socket's C handle is not where zmq4 v1.4.0 keeps it (field soc): build with the zmq4 version go.mod pins")

// newReceiver returns so's receiver.
func newReceiver(so *zmq.Socket) (*receiver, error) {
	v := reflect.ValueOf(so).Elem().FieldByName("soc")
	if !v.IsValid() || v.Kind() != reflect.UnsafePointer {
		return nil, errNoHandle
	}
	h := *(*unsafe.Pointer)(unsafe.Pointer(v.UnsafeAddr()))
	if h == nil {
		return nil, errNoHandle
	}
	return &receiver{so: so, handle: h, f: new(C.lm_frame), scratch: make([]byte, scratchBytes)}, nil
}

// recvPeer receives one message with flags, appended to frames (each frame a slice of its
// own), and the address of the peer it came from ("" if unknown). The address is taken from
// the first frame that carries it: the routing id frame of a ROUTER carries none when
// ZMQ_EVENTS (read by every zmqwait.Waiter.Wait) has prefetched the message, in libzmq
// before 4.3.5 (zeromq/libzmq#4317; Debian 12 ships 4.3.4), while the frames the peer sent
// always do. Errors are zmq.Errno values, as zmq4's own.
func (r *receiver) recvPeer(flags zmq.Flag, frames [][]byte) (_ [][]byte, peer string, err error) {
	for {
		wantPeer := C.int(0)
		if peer == "" {
			wantPeer = 1
		}
		rc, err := C.lm_recv_frame(r.handle, C.int(flags), r.f, unsafe.Pointer(&r.scratch[0]), C.int(len(r.scratch)), wantPeer)
		if rc < 0 {
			if eno, ok := err.(syscall.Errno); ok && eno == syscall.EINTR {
				continue
			}
			return frames[:0], "", asZMQErr(err)
		}
		b := make([]byte, int(r.f.size))
		if rc == 0 {
			copy(b, r.scratch)
		} else {
			C.lm_take_frame(r.f, unsafe.Pointer(&b[0]))
		}
		frames = append(frames, b)
		if peer == "" && r.f.peer[0] != 0 {
			peer = C.GoString(&r.f.peer[0])
		}
		if r.f.more == 0 {
			return frames, peer, nil
		}
	}
}

// asZMQErr is err as zmq4 returns a socket call's error: its errno as a zmq.Errno.
func asZMQErr(err error) error {
	if eno, ok := err.(syscall.Errno); ok {
		return zmq.Errno(eno)
	}
	return err
}
