package lmcache

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
)

// abstractUnix says whether the libzmq sockets behind the fronts listen in Linux's abstract
// Unix socket namespace (no file: the chart's root file system is read-only); elsewhere they
// are files in a directory of their own under the temporary directory, open to the process's
// user only. A variable so that a test can take the other way on Linux.
var abstractUnix = runtime.GOOS == "linux"

// innerSockets names the Unix sockets the controller's libzmq sockets listen on, one a
// socket, behind their fronts.
type innerSockets struct {
	prefix string // abstract: "@loadaware-lmcache-<random>-"; else "<dir>/"
	dir    string // the directory to remove ("" when abstract)
}

func newInnerSockets() (*innerSockets, error) {
	if abstractUnix {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, fmt.Errorf("lmcache: a name for the ZMTP front's sockets: %w", err)
		}
		return &innerSockets{prefix: "@loadaware-lmcache-" + hex.EncodeToString(b[:]) + "-"}, nil
	}
	dir, err := os.MkdirTemp("", "loadaware-lmcache-") // mode 0700
	if err != nil {
		return nil, fmt.Errorf("lmcache: a directory for the ZMTP front's Unix sockets (set TMPDIR to a writable directory): %w", err)
	}
	return &innerSockets{prefix: dir + string(filepath.Separator), dir: dir}, nil
}

// addr is the address of the socket named what.
func (in *innerSockets) addr(what string) string { return in.prefix + what }

// remove deletes the sockets' directory, if they have one; the sockets are closed first.
func (in *innerSockets) remove() {
	if in != nil && in.dir != "" {
		os.RemoveAll(in.dir)
	}
}
