package lmcache

import (
	"fmt"
	"sort"

	"github.com/tinylib/msgp/msgp"
)

// Message is one LMCache controller message: a value of one of the *Msg types below.
type Message interface {
	// Tag is the msgspec tag, the class name LMCache writes under "type".
	Tag() string
}

// RegisterMsg announces a worker (one tensor-parallel rank of an engine). LMCache 0.3.9
// pushes it on the pull channel; newer workers send it on the reply channel and wait for
// a RegisterRetMsg.
type RegisterMsg struct {
	InstanceID string
	WorkerID   int
	IP         string // the worker's pod IP: how an instance is mapped to an endpoint
	Port       int    // the worker's control port
	// DistributedURL is the LMCache 0.3.9 field. When it is non-nil, Encode writes the
	// 0.3.9 shape (distributed_url) and ignores PeerInitURL.
	DistributedURL *string
	// PeerInitURL is the newer field (optional; encoded as nil when absent).
	PeerInitURL *string
}

// HeartbeatMsg has RegisterMsg's fields; a heartbeat from an unknown worker registers it.
type HeartbeatMsg RegisterMsg

// DeRegisterMsg removes a worker.
type DeRegisterMsg struct {
	InstanceID string
	WorkerID   int
	IP         string
	Port       int
}

// KVAdmitMsg says the worker stored the chunk Key at Location.
type KVAdmitMsg struct {
	InstanceID string
	WorkerID   int
	Key        int64 // a uint64 key on the wire keeps its 64 bits (two's complement)
	Location   string
	// SeqNum is written by newer workers; nil encodes the 0.3.9 shape (no seq_num).
	SeqNum *int64
}

// KVEvictMsg says the worker dropped the chunk Key from Location.
type KVEvictMsg KVAdmitMsg

// OpType is the kind of one operation of a BatchedKVOperationMsg.
type OpType string

// The operation types of BatchedKVOperationMsg.
const (
	OpAdmit OpType = "admit"
	OpEvict OpType = "evict"
)

// KVOp is one operation of a BatchedKVOperationMsg (an untagged map on the wire).
type KVOp struct {
	Op     OpType
	Key    int64
	SeqNum int64
}

// BatchedKVOperationMsg carries admits and evicts of one worker and location (newer LMCache).
type BatchedKVOperationMsg struct {
	InstanceID string
	WorkerID   int
	Location   string
	Operations []KVOp
}

// FullSyncBatchMsg carries part of a worker's complete key set for one location.
type FullSyncBatchMsg struct {
	InstanceID string
	WorkerID   int
	Location   string
	SyncID     string
	BatchID    int
	Keys       []int64
}

// FullSyncEndMsg ends a full sync: the keys sent under SyncID are then the worker's whole
// key set at Location.
type FullSyncEndMsg struct {
	InstanceID      string
	WorkerID        int
	Location        string
	SyncID          string
	ActualTotalKeys int
}

// RegisterRetMsg answers a RegisterMsg. ExtraConfig may carry "heartbeat_url"; Encode
// writes its keys in sorted order.
type RegisterRetMsg struct {
	ExtraConfig map[string]string
}

// HeartbeatRetMsg answers a HeartbeatMsg. This controller never sends commands, so the
// commands list is always encoded empty, and decoding skips any commands it carries.
type HeartbeatRetMsg struct{}

// ErrorMsg answers a request the controller cannot serve.
type ErrorMsg struct {
	Error string
}

// Tag implements Message.
func (RegisterMsg) Tag() string { return "RegisterMsg" }

// Tag implements Message.
func (HeartbeatMsg) Tag() string { return "HeartbeatMsg" }

// Tag implements Message.
func (DeRegisterMsg) Tag() string { return "DeRegisterMsg" }

// Tag implements Message.
func (KVAdmitMsg) Tag() string { return "KVAdmitMsg" }

// Tag implements Message.
func (KVEvictMsg) Tag() string { return "KVEvictMsg" }

// Tag implements Message.
func (BatchedKVOperationMsg) Tag() string { return "BatchedKVOperationMsg" }

// Tag implements Message.
func (FullSyncBatchMsg) Tag() string { return "FullSyncBatchMsg" }

// Tag implements Message.
func (FullSyncEndMsg) Tag() string { return "FullSyncEndMsg" }

// Tag implements Message.
func (RegisterRetMsg) Tag() string { return "RegisterRetMsg" }

// Tag implements Message.
func (HeartbeatRetMsg) Tag() string { return "HeartbeatRetMsg" }

// Tag implements Message.
func (ErrorMsg) Tag() string { return "ErrorMsg" }

// Encode returns msg encoded exactly as msgspec 0.19 encodes the LMCache class: a map whose
// first pair is "type" -> tag, then every field in declaration order, integers in their
// smallest form.
func Encode(msg Message) ([]byte, error) {
	return AppendEncode(make([]byte, 0, 128), msg)
}

// AppendEncode appends the encoding of msg (see Encode) to dst.
func AppendEncode(dst []byte, msg Message) ([]byte, error) {
	switch m := msg.(type) {
	case RegisterMsg:
		return appendRegister(dst, m.Tag(), m), nil
	case HeartbeatMsg:
		return appendRegister(dst, m.Tag(), RegisterMsg(m)), nil
	case DeRegisterMsg:
		dst = appendHead(dst, 5, m.Tag())
		dst = appendWorker(dst, m.InstanceID, m.WorkerID)
		dst = msgp.AppendString(msgp.AppendString(dst, "ip"), m.IP)
		return appendInt(msgp.AppendString(dst, "port"), int64(m.Port)), nil
	case KVAdmitMsg:
		return appendKV(dst, m.Tag(), m), nil
	case KVEvictMsg:
		return appendKV(dst, m.Tag(), KVAdmitMsg(m)), nil
	case BatchedKVOperationMsg:
		dst = appendHead(dst, 5, m.Tag())
		dst = appendWorker(dst, m.InstanceID, m.WorkerID)
		dst = msgp.AppendString(msgp.AppendString(dst, "location"), m.Location)
		dst = msgp.AppendArrayHeader(msgp.AppendString(dst, "operations"), uint32(len(m.Operations)))
		for _, op := range m.Operations {
			dst = msgp.AppendMapHeader(dst, 3)
			dst = msgp.AppendString(msgp.AppendString(dst, "op_type"), string(op.Op))
			dst = appendInt(msgp.AppendString(dst, "key"), op.Key)
			dst = appendInt(msgp.AppendString(dst, "seq_num"), op.SeqNum)
		}
		return dst, nil
	case FullSyncBatchMsg:
		dst = appendHead(dst, 7, m.Tag())
		dst = appendWorker(dst, m.InstanceID, m.WorkerID)
		dst = msgp.AppendString(msgp.AppendString(dst, "location"), m.Location)
		dst = msgp.AppendString(msgp.AppendString(dst, "sync_id"), m.SyncID)
		dst = appendInt(msgp.AppendString(dst, "batch_id"), int64(m.BatchID))
		dst = msgp.AppendArrayHeader(msgp.AppendString(dst, "keys"), uint32(len(m.Keys)))
		for _, k := range m.Keys {
			dst = appendInt(dst, k)
		}
		return dst, nil
	case FullSyncEndMsg:
		dst = appendHead(dst, 6, m.Tag())
		dst = appendWorker(dst, m.InstanceID, m.WorkerID)
		dst = msgp.AppendString(msgp.AppendString(dst, "location"), m.Location)
		dst = msgp.AppendString(msgp.AppendString(dst, "sync_id"), m.SyncID)
		return appendInt(msgp.AppendString(dst, "actual_total_keys"), int64(m.ActualTotalKeys)), nil
	case RegisterRetMsg:
		dst = appendHead(dst, 2, m.Tag())
		keys := make([]string, 0, len(m.ExtraConfig))
		for k := range m.ExtraConfig {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		dst = msgp.AppendMapHeader(msgp.AppendString(dst, "extra_config"), uint32(len(keys)))
		for _, k := range keys {
			dst = msgp.AppendString(msgp.AppendString(dst, k), m.ExtraConfig[k])
		}
		return dst, nil
	case HeartbeatRetMsg:
		dst = appendHead(dst, 2, m.Tag())
		return msgp.AppendArrayHeader(msgp.AppendString(dst, "commands"), 0), nil
	case ErrorMsg:
		dst = appendHead(dst, 2, m.Tag())
		return msgp.AppendString(msgp.AppendString(dst, "error"), m.Error), nil
	case nil:
		return dst, fmt.Errorf("lmcache: encode: nil message")
	}
	return dst, fmt.Errorf("lmcache: encode: unsupported message type %T: use one of the *Msg value types of package lmcache", msg)
}

func appendHead(dst []byte, pairs uint32, tag string) []byte {
	dst = msgp.AppendMapHeader(dst, pairs)
	return msgp.AppendString(msgp.AppendString(dst, "type"), tag)
}

func appendWorker(dst []byte, instanceID string, workerID int) []byte {
	dst = msgp.AppendString(msgp.AppendString(dst, "instance_id"), instanceID)
	return appendInt(msgp.AppendString(dst, "worker_id"), int64(workerID))
}

func appendRegister(dst []byte, tag string, m RegisterMsg) []byte {
	dst = appendHead(dst, 6, tag)
	dst = appendWorker(dst, m.InstanceID, m.WorkerID)
	dst = msgp.AppendString(msgp.AppendString(dst, "ip"), m.IP)
	dst = appendInt(msgp.AppendString(dst, "port"), int64(m.Port))
	if m.DistributedURL != nil {
		return msgp.AppendString(msgp.AppendString(dst, "distributed_url"), *m.DistributedURL)
	}
	dst = msgp.AppendString(dst, "peer_init_url")
	if m.PeerInitURL == nil {
		return msgp.AppendNil(dst)
	}
	return msgp.AppendString(dst, *m.PeerInitURL)
}

func appendKV(dst []byte, tag string, m KVAdmitMsg) []byte {
	n := uint32(5)
	if m.SeqNum != nil {
		n = 6
	}
	dst = appendHead(dst, n, tag)
	dst = appendWorker(dst, m.InstanceID, m.WorkerID)
	dst = appendInt(msgp.AppendString(dst, "key"), m.Key)
	dst = msgp.AppendString(msgp.AppendString(dst, "location"), m.Location)
	if m.SeqNum != nil {
		dst = appendInt(msgp.AppendString(dst, "seq_num"), *m.SeqNum)
	}
	return dst
}

// appendInt writes v in msgspec's form: non-negative values use the unsigned encodings,
// negative values the signed ones, each the smallest that fits.
func appendInt(dst []byte, v int64) []byte {
	if v >= 0 {
		return msgp.AppendUint64(dst, uint64(v))
	}
	return msgp.AppendInt64(dst, v)
}
