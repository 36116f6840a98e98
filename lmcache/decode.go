package lmcache

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/tinylib/msgp/msgp"
)

// The kinds of DecodeError, a small fixed set (they label a metric).
const (
	KindMalformed    = "malformed"     // not a msgpack map or JSON object, or truncated
	KindUnknownType  = "unknown_type"  // a "type" this controller does not handle
	KindMissingField = "missing_field" // a required field is absent or nil
	KindBadField     = "bad_field"     // a field has the wrong type or an out-of-range value
)

// DecodeError says why a frame could not be decoded.
type DecodeError struct {
	Kind string // one of the Kind* constants
	Tag  string // the message's "type" when it was read
	Err  error
}

func (e *DecodeError) Error() string {
	if e.Tag != "" {
		return fmt.Sprintf("lmcache: decode %s (%s): %v", e.Tag, e.Kind, e.Err)
	}
	return fmt.Sprintf("lmcache: decode (%s): %v", e.Kind, e.Err)
}

func (e *DecodeError) Unwrap() error { return e.Err }

// Decode decodes one frame: a msgpack map tagged by "type" (what msgspec writes) or, when
// its first byte is '{', a JSON object with the same convention. Unknown keys are ignored,
// optional fields may be missing, and integers may use any width. A frame that cannot be
// decoded returns a *DecodeError.
func Decode(frame []byte) (Message, error) {
	return decodeAfter(frame, "")
}

// decodeAfter is Decode for a frame of a batch whose previous frame named instance prev:
// an equal instance_id is returned as prev itself, not a new string (the frames of a
// worker's batch name one instance).
func decodeAfter(frame []byte, prev string) (Message, error) {
	f := fields{prevID: prev}
	var err error
	if len(frame) > 0 && frame[0] == '{' {
		err = f.readJSON(frame)
	} else {
		err = f.readMsgpack(frame)
	}
	if err != nil {
		return nil, err
	}
	return f.build()
}

// Field presence bits.
const (
	hasType uint32 = 1 << iota
	hasInstanceID
	hasWorkerID
	hasIP
	hasPort
	hasKey
	hasLocation
	hasSeqNum
	hasOperations
	hasSyncID
	hasBatchID
	hasKeys
	hasTotal
	hasError
)

// fields collects every field any message has; build then checks the ones its tag needs.
type fields struct {
	have                                  uint32
	prevID                                string // an instance_id equal to it is returned as it (decodeAfter)
	tag                                   string
	instanceID, ip, location, syncID, err string
	workerID, port, batchID, total        int64
	key, seqNum                           int64
	distributedURL, peerInitURL           *string
	ops                                   []KVOp
	keys                                  []int64
	extra                                 map[string]string
}

func malformed(err error) error {
	return &DecodeError{Kind: KindMalformed, Err: err}
}

func (f *fields) bad(name string, err error) error {
	return &DecodeError{Kind: KindBadField, Tag: f.tag, Err: fmt.Errorf("field %s: %w", name, err)}
}

func (f *fields) readMsgpack(b []byte) error {
	if len(b) == 0 {
		return malformed(errors.New("empty frame"))
	}
	n, b, err := msgp.ReadMapHeaderBytes(b)
	if err != nil {
		return malformed(fmt.Errorf("not a msgpack map: %w", err))
	}
	for i := uint32(0); i < n; i++ {
		var k []byte
		k, b, err = msgp.ReadMapKeyZC(b)
		if err != nil {
			return malformed(fmt.Errorf("map key %d: %w", i, err))
		}
		b, err = f.readValue(k, b)
		if err != nil {
			return err
		}
	}
	return nil
}

// readValue reads the value of the pair whose key is k.
func (f *fields) readValue(k, b []byte) ([]byte, error) {
	var err error
	switch string(k) {
	case "type":
		f.tag, b, err = readKnownStr(b)
		f.have |= hasType
		if err != nil {
			return b, malformed(fmt.Errorf("field type: %w", err))
		}
		return b, nil
	case "instance_id":
		if msgp.IsNil(b) {
			return b[1:], nil
		}
		s, o, err := msgp.ReadMapKeyZC(b)
		if err != nil {
			return o, f.bad("instance_id", err)
		}
		f.instanceID = f.prevID
		if string(s) != f.prevID {
			f.instanceID = string(s)
		}
		f.have |= hasInstanceID
		return o, nil
	case "ip":
		return f.str(b, readStr, &f.ip, hasIP, "ip")
	case "location":
		return f.str(b, readKnownStr, &f.location, hasLocation, "location")
	case "sync_id":
		return f.str(b, readStr, &f.syncID, hasSyncID, "sync_id")
	case "error":
		return f.str(b, readStr, &f.err, hasError, "error")
	case "worker_id":
		return f.int(b, &f.workerID, hasWorkerID, "worker_id")
	case "port":
		return f.int(b, &f.port, hasPort, "port")
	case "batch_id":
		return f.int(b, &f.batchID, hasBatchID, "batch_id")
	case "actual_total_keys":
		return f.int(b, &f.total, hasTotal, "actual_total_keys")
	case "seq_num":
		return f.int(b, &f.seqNum, hasSeqNum, "seq_num")
	case "key":
		if msgp.IsNil(b) {
			return b[1:], nil
		}
		f.key, b, err = readKey(b)
		if err != nil {
			return b, f.bad("key", err)
		}
		f.have |= hasKey
		return b, nil
	case "distributed_url":
		return f.optStr(b, &f.distributedURL, "distributed_url")
	case "peer_init_url":
		return f.optStr(b, &f.peerInitURL, "peer_init_url")
	case "keys":
		return f.readKeys(b)
	case "operations":
		return f.readOps(b)
	case "extra_config":
		return f.readExtra(b)
	}
	b, err = msgp.Skip(b)
	if err != nil {
		return b, malformed(fmt.Errorf("value of %q: %w", k, err))
	}
	return b, nil
}

// str reads a string field into dst with read (readStr, or readKnownStr for a field whose
// values are few).
func (f *fields) str(b []byte, read func([]byte) (string, []byte, error), dst *string, bit uint32, name string) ([]byte, error) {
	if msgp.IsNil(b) {
		return b[1:], nil
	}
	s, o, err := read(b)
	if err != nil {
		return o, f.bad(name, err)
	}
	*dst = s
	f.have |= bit
	return o, nil
}

func (f *fields) optStr(b []byte, dst **string, name string) ([]byte, error) {
	if msgp.IsNil(b) {
		return b[1:], nil
	}
	s, o, err := readStr(b)
	if err != nil {
		return o, f.bad(name, err)
	}
	*dst = &s
	return o, nil
}

func (f *fields) int(b []byte, dst *int64, bit uint32, name string) ([]byte, error) {
	if msgp.IsNil(b) {
		return b[1:], nil
	}
	v, o, err := msgp.ReadInt64Bytes(b)
	if err != nil {
		return o, f.bad(name, err)
	}
	*dst = v
	f.have |= bit
	return o, nil
}

func (f *fields) readKeys(b []byte) ([]byte, error) {
	n, b, err := msgp.ReadArrayHeaderBytes(b)
	if err != nil {
		return b, f.bad("keys", err)
	}
	f.keys = make([]int64, 0, min(int(n), len(b)))
	for i := uint32(0); i < n; i++ {
		var k int64
		k, b, err = readKey(b)
		if err != nil {
			return b, f.bad("keys", err)
		}
		f.keys = append(f.keys, k)
	}
	f.have |= hasKeys
	return b, nil
}

func (f *fields) readOps(b []byte) ([]byte, error) {
	n, b, err := msgp.ReadArrayHeaderBytes(b)
	if err != nil {
		return b, f.bad("operations", err)
	}
	f.ops = make([]KVOp, 0, min(int(n), len(b)))
	for i := uint32(0); i < n; i++ {
		var m uint32
		m, b, err = msgp.ReadMapHeaderBytes(b)
		if err != nil {
			return b, f.bad("operations", err)
		}
		var op KVOp
		var haveOp, haveKey bool
		for j := uint32(0); j < m; j++ {
			var k []byte
			k, b, err = msgp.ReadMapKeyZC(b)
			if err != nil {
				return b, f.bad("operations", err)
			}
			switch string(k) {
			case "op_type":
				var s []byte
				s, b, err = msgp.ReadStringZC(b)
				switch {
				case err != nil:
				case string(s) == string(OpAdmit):
					op.Op, haveOp = OpAdmit, true
				case string(s) == string(OpEvict):
					op.Op, haveOp = OpEvict, true
				default:
					err = fmt.Errorf("op_type %q is neither admit nor evict", s)
				}
			case "key":
				op.Key, b, err = readKey(b)
				haveKey = err == nil
			case "seq_num":
				op.SeqNum, b, err = msgp.ReadInt64Bytes(b)
			default:
				b, err = msgp.Skip(b)
			}
			if err != nil {
				return b, f.bad(fmt.Sprintf("operations[%d].%s", i, k), err)
			}
		}
		if !haveOp || !haveKey {
			return b, &DecodeError{Kind: KindMissingField, Tag: f.tag, Err: fmt.Errorf("operations[%d] lacks op_type or key", i)}
		}
		f.ops = append(f.ops, op)
	}
	f.have |= hasOperations
	return b, nil
}

func (f *fields) readExtra(b []byte) ([]byte, error) {
	if msgp.IsNil(b) {
		return b[1:], nil
	}
	n, b, err := msgp.ReadMapHeaderBytes(b)
	if err != nil {
		return b, f.bad("extra_config", err)
	}
	f.extra = make(map[string]string, min(int(n), len(b)))
	for i := uint32(0); i < n; i++ {
		var k, v string
		if k, b, err = readStr(b); err == nil {
			v, b, err = readStr(b)
		}
		if err != nil {
			return b, f.bad("extra_config", err)
		}
		f.extra[k] = v
	}
	return b, nil
}

// known holds the strings most frames repeat, each frame its own copy: the message tags
// and the storage locations LMCache 0.3.9 names. readKnownStr returns these from here, so
// that decoding a frame does not allocate them (two of the four allocations of a decoded
// KVAdmitMsg; decision 1143).
var known = func() map[string]string {
	m := map[string]string{"LocalCPUBackend": "LocalCPUBackend", "LocalDiskBackend": "LocalDiskBackend"}
	for _, t := range messageTypes {
		m[t] = t
	}
	return m
}()

// readKnownStr is readStr for a value that is most often one of known's.
func readKnownStr(b []byte) (string, []byte, error) {
	s, o, err := msgp.ReadMapKeyZC(b)
	if err != nil {
		return "", b, err
	}
	if k, ok := known[string(s)]; ok {
		return k, o, nil
	}
	return string(s), o, nil
}

// readStr reads a msgpack str (or bin) as a Go string.
func readStr(b []byte) (string, []byte, error) {
	s, o, err := msgp.ReadMapKeyZC(b)
	if err != nil {
		return "", b, err
	}
	return string(s), o, nil
}

// readKey reads a chunk key of any integer width; a uint64 above MaxInt64 keeps its bits.
func readKey(b []byte) (int64, []byte, error) {
	if msgp.NextType(b) == msgp.UintType {
		u, o, err := msgp.ReadUint64Bytes(b)
		return int64(u), o, err
	}
	return msgp.ReadInt64Bytes(b)
}

// build checks the fields the tag needs and returns the message.
func (f *fields) build() (Message, error) {
	if f.have&hasType == 0 {
		return nil, malformed(errors.New(`no "type" field: not an LMCache message`))
	}
	need := func(bits uint32, names string) error {
		if f.have&bits != bits {
			return &DecodeError{Kind: KindMissingField, Tag: f.tag, Err: fmt.Errorf("needs %s", names)}
		}
		return nil
	}
	wid, err := f.intField(f.workerID, "worker_id")
	if err != nil {
		return nil, err
	}
	switch f.tag {
	case "RegisterMsg", "HeartbeatMsg":
		if err := need(hasInstanceID, "instance_id"); err != nil {
			return nil, err
		}
		port, err := f.intField(f.port, "port")
		if err != nil {
			return nil, err
		}
		m := RegisterMsg{InstanceID: f.instanceID, WorkerID: wid, IP: f.ip, Port: port,
			DistributedURL: f.distributedURL, PeerInitURL: f.peerInitURL}
		if f.tag == "HeartbeatMsg" {
			return HeartbeatMsg(m), nil
		}
		return m, nil
	case "DeRegisterMsg":
		if err := need(hasInstanceID, "instance_id"); err != nil {
			return nil, err
		}
		port, err := f.intField(f.port, "port")
		if err != nil {
			return nil, err
		}
		return DeRegisterMsg{InstanceID: f.instanceID, WorkerID: wid, IP: f.ip, Port: port}, nil
	case "KVAdmitMsg", "KVEvictMsg":
		if err := need(hasInstanceID|hasKey, "instance_id and key"); err != nil {
			return nil, err
		}
		m := KVAdmitMsg{InstanceID: f.instanceID, WorkerID: wid, Key: f.key, Location: f.location}
		if f.have&hasSeqNum != 0 {
			s := f.seqNum
			m.SeqNum = &s
		}
		if f.tag == "KVEvictMsg" {
			return KVEvictMsg(m), nil
		}
		return m, nil
	case "BatchedKVOperationMsg":
		if err := need(hasInstanceID|hasOperations, "instance_id and operations"); err != nil {
			return nil, err
		}
		return BatchedKVOperationMsg{InstanceID: f.instanceID, WorkerID: wid, Location: f.location, Operations: f.ops}, nil
	case "FullSyncBatchMsg":
		if err := need(hasInstanceID|hasSyncID|hasKeys, "instance_id, sync_id and keys"); err != nil {
			return nil, err
		}
		bid, err := f.intField(f.batchID, "batch_id")
		if err != nil {
			return nil, err
		}
		return FullSyncBatchMsg{InstanceID: f.instanceID, WorkerID: wid, Location: f.location,
			SyncID: f.syncID, BatchID: bid, Keys: f.keys}, nil
	case "FullSyncEndMsg":
		if err := need(hasInstanceID|hasSyncID, "instance_id and sync_id"); err != nil {
			return nil, err
		}
		total, err := f.intField(f.total, "actual_total_keys")
		if err != nil {
			return nil, err
		}
		return FullSyncEndMsg{InstanceID: f.instanceID, WorkerID: wid, Location: f.location,
			SyncID: f.syncID, ActualTotalKeys: total}, nil
	case "RegisterRetMsg":
		extra := f.extra
		if extra == nil {
			extra = map[string]string{}
		}
		return RegisterRetMsg{ExtraConfig: extra}, nil
	case "HeartbeatRetMsg":
		return HeartbeatRetMsg{}, nil
	case "ErrorMsg":
		return ErrorMsg{Error: f.err}, nil
	}
	return nil, &DecodeError{Kind: KindUnknownType, Tag: f.tag, Err: errors.New("this controller does not handle this message type")}
}

// intField narrows a decoded integer to int, refusing values a worker could not mean.
func (f *fields) intField(v int64, name string) (int, error) {
	if v < math.MinInt32 || v > math.MaxInt32 {
		return 0, f.bad(name, fmt.Errorf("%d is out of range", v))
	}
	return int(v), nil
}

// readJSON fills f from a JSON object with the same keys.
func (f *fields) readJSON(frame []byte) error {
	dec := json.NewDecoder(bytes.NewReader(frame))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil {
		return malformed(fmt.Errorf("JSON frame: %w", err))
	}
	if t, ok := obj["type"].(string); ok {
		f.tag = t
		f.have |= hasType
	}
	for k, v := range obj {
		if err := f.jsonValue(k, v); err != nil {
			return err
		}
	}
	return nil
}

func (f *fields) jsonValue(k string, v any) error {
	if v == nil {
		return nil
	}
	str := func(dst *string, bit uint32) error {
		s, ok := v.(string)
		if !ok {
			return f.bad(k, fmt.Errorf("want a string, got %T", v))
		}
		*dst = s
		f.have |= bit
		return nil
	}
	num := func(dst *int64, bit uint32) error {
		n, err := jsonInt(v)
		if err != nil {
			return f.bad(k, err)
		}
		*dst = n
		f.have |= bit
		return nil
	}
	switch k {
	case "type":
		if _, ok := v.(string); !ok {
			return malformed(fmt.Errorf("field type: want a string, got %T", v))
		}
		return nil
	case "instance_id":
		return str(&f.instanceID, hasInstanceID)
	case "ip":
		return str(&f.ip, hasIP)
	case "location":
		return str(&f.location, hasLocation)
	case "sync_id":
		return str(&f.syncID, hasSyncID)
	case "error":
		return str(&f.err, hasError)
	case "distributed_url", "peer_init_url":
		var s string
		if err := str(&s, 0); err != nil {
			return err
		}
		if k == "distributed_url" {
			f.distributedURL = &s
		} else {
			f.peerInitURL = &s
		}
		return nil
	case "worker_id":
		return num(&f.workerID, hasWorkerID)
	case "port":
		return num(&f.port, hasPort)
	case "batch_id":
		return num(&f.batchID, hasBatchID)
	case "actual_total_keys":
		return num(&f.total, hasTotal)
	case "seq_num":
		return num(&f.seqNum, hasSeqNum)
	case "key":
		return num(&f.key, hasKey)
	case "keys":
		arr, ok := v.([]any)
		if !ok {
			return f.bad(k, fmt.Errorf("want an array, got %T", v))
		}
		f.keys = make([]int64, 0, len(arr))
		for _, e := range arr {
			n, err := jsonInt(e)
			if err != nil {
				return f.bad(k, err)
			}
			f.keys = append(f.keys, n)
		}
		f.have |= hasKeys
		return nil
	case "operations":
		arr, ok := v.([]any)
		if !ok {
			return f.bad(k, fmt.Errorf("want an array, got %T", v))
		}
		f.ops = make([]KVOp, 0, len(arr))
		for i, e := range arr {
			m, ok := e.(map[string]any)
			if !ok {
				return f.bad(k, fmt.Errorf("operations[%d]: want an object, got %T", i, e))
			}
			op, err := jsonOp(m)
			if err != nil {
				return f.bad(fmt.Sprintf("operations[%d]", i), err)
			}
			f.ops = append(f.ops, op)
		}
		f.have |= hasOperations
		return nil
	case "extra_config":
		m, ok := v.(map[string]any)
		if !ok {
			return f.bad(k, fmt.Errorf("want an object, got %T", v))
		}
		f.extra = make(map[string]string, len(m))
		for ek, ev := range m {
			s, ok := ev.(string)
			if !ok {
				return f.bad(k, fmt.Errorf("%s: want a string, got %T", ek, ev))
			}
			f.extra[ek] = s
		}
		return nil
	}
	return nil
}

func jsonOp(m map[string]any) (KVOp, error) {
	var op KVOp
	switch m["op_type"] {
	case string(OpAdmit):
		op.Op = OpAdmit
	case string(OpEvict):
		op.Op = OpEvict
	default:
		return op, fmt.Errorf("op_type %v is neither admit nor evict", m["op_type"])
	}
	k, ok := m["key"]
	if !ok {
		return op, errors.New("no key")
	}
	var err error
	if op.Key, err = jsonInt(k); err != nil {
		return op, err
	}
	if s, ok := m["seq_num"]; ok && s != nil {
		if op.SeqNum, err = jsonInt(s); err != nil {
			return op, err
		}
	}
	return op, nil
}

// jsonInt accepts a JSON integer in the int64 or uint64 range (uint64 keeps its bits).
func jsonInt(v any) (int64, error) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, fmt.Errorf("want an integer, got %T", v)
	}
	if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return i, nil
	}
	u, err := strconv.ParseUint(string(n), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("want an integer, got %s", n)
	}
	return int64(u), nil
}
