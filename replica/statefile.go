package replica

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"
)

// stateMagic opens a state file; the version follows the wire's.
var stateMagic = []byte("loadaware-epp state 1\n")

// maxStateRecord bounds one record of a state file (a snapshot chunk is 512 KiB).
const maxStateRecord = 8 << 20

// SaveState writes the gate's index to path atomically (a temporary file in the same
// directory, synced, then renamed over path).
func SaveState(path string, g *Gate) error {
	var buf bytes.Buffer
	buf.Write(stateMagic)
	n := 0
	g.mu.Lock()
	err := g.exportLocked(0, snapshotChunkBytes, func(b []byte) error {
		buf.Write(binary.AppendUvarint(nil, uint64(len(b))))
		buf.Write(b)
		n++
		return nil
	})
	g.mu.Unlock()
	if err != nil {
		return fmt.Errorf("replica: --state-file: export the index: %w", err)
	}
	end := AppendEncode(nil, Message{Kind: KindSnapEnd, Chunks: uint64(n)})
	buf.Write(binary.AppendUvarint(nil, uint64(len(end))))
	buf.Write(end)
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("replica: --state-file %s: %w (the directory must be writable)", path, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(buf.Bytes()); err != nil {
		tmp.Close()
		return fmt.Errorf("replica: --state-file %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("replica: --state-file %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("replica: --state-file %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("replica: --state-file %s: %w", path, err)
	}
	return nil
}

// LoadState applies the index saved at path to the gate's index and returns how many
// chunks it held. A missing file is no error (a first start). A file that is not a
// complete state file is refused whole: nothing is applied and the error says why. The
// instances it restores are dropped once their engine speaks as another instance id.
func LoadState(path string, g *Gate) (int, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("replica: --state-file %s: %w", path, err)
	}
	defer f.Close()
	chunks, err := readState(bufio.NewReader(f))
	if err != nil {
		return 0, fmt.Errorf("replica: --state-file %s: %w (remove the file to start empty)", path, err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, c := range chunks {
		g.restoreLocked(c.Peer, c.Frames)
	}
	return len(chunks), nil
}

// readState parses a state file: the magic, KindFrames records, one KindSnapEnd record
// counting them, nothing after.
func readState(r *bufio.Reader) ([]Message, error) {
	head := make([]byte, len(stateMagic))
	if _, err := io.ReadFull(r, head); err != nil || !bytes.Equal(head, stateMagic) {
		return nil, errors.New("not a loadaware-epp state file (or another version)")
	}
	var chunks []Message
	for {
		n, err := binary.ReadUvarint(r)
		if err != nil {
			return nil, errors.New("truncated: no end record (a save was interrupted)")
		}
		if n > maxStateRecord {
			return nil, fmt.Errorf("a record of %d bytes is over the %d-byte limit", n, maxStateRecord)
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, errors.New("truncated inside a record")
		}
		m, err := Decode(b)
		if err != nil {
			return nil, err
		}
		switch m.Kind {
		case KindFrames:
			chunks = append(chunks, m)
		case KindSnapEnd:
			if m.Chunks != uint64(len(chunks)) {
				return nil, fmt.Errorf("the end record counts %d chunks, the file holds %d", m.Chunks, len(chunks))
			}
			if _, err := r.ReadByte(); err != io.EOF {
				return nil, errors.New("bytes after the end record")
			}
			return chunks, nil
		default:
			return nil, fmt.Errorf("unexpected %s record", m.Kind)
		}
	}
}

// RunStateFile saves the gate's index to path every interval until ctx ends, then once
// more. Failures are logged and counted, never fatal.
func RunStateFile(ctx context.Context, path string, interval time.Duration, g *Gate, log *slog.Logger) {
	save := func() {
		if err := SaveState(path, g); err != nil {
			g.met.saves.WithLabelValues("error").Inc()
			log.Warn("replica: saving the state file failed", "err", err)
			return
		}
		g.met.saves.WithLabelValues("ok").Inc()
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			save()
			return
		case <-t.C:
			save()
		}
	}
}
