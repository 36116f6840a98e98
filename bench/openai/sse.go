package openai

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// maxLine bounds one line of a stream.
const maxLine = 1 << 20

var errLineTooLong = errors.New("a stream line is longer than 1 MiB")

// ReadStream reads a server-sent event stream of OpenAI completion or chat chunks until it
// ends, stamping with now the arrival of every event whose first choice carries text (a
// completion's text or a chat delta's content). Events are separated by blank lines; an
// event's data lines are joined with newlines; comments (":") and fields other than data are
// skipped; an event left unterminated at the end of the stream still counts. It fails, with
// what it read so far, when a line is longer than 1 MiB, an event's data is neither JSON nor
// [DONE], the server sends an error object, an event follows [DONE], or reading fails.
func ReadStream(r io.Reader, now func() time.Time) (Stream, error) {
	s := Stream{CompletionTokens: -1}
	br := bufio.NewReaderSize(r, 16<<10)
	var data []byte
	pending := false
	for n := 1; ; n++ {
		line, rerr := readLine(br)
		if rerr != nil && !errors.Is(rerr, io.EOF) {
			return s, fmt.Errorf("line %d: %w", n, rerr)
		}
		eof := rerr != nil
		if len(line) > 0 {
			addField(line, &data, &pending)
			if !eof {
				continue
			}
		}
		// A blank line, or the end of the stream, ends the pending event.
		if pending {
			if err := s.dispatch(data, now); err != nil {
				return s, fmt.Errorf("the event ending on line %d: %w", n, err)
			}
		}
		data, pending = data[:0], false
		if eof {
			return s, nil
		}
	}
}

// addField adds a data field's value to the pending event's data; other lines are skipped.
func addField(line []byte, data *[]byte, pending *bool) {
	value, ok := bytes.CutPrefix(line, []byte("data:"))
	if !ok {
		return
	}
	value, _ = bytes.CutPrefix(value, []byte(" "))
	if *pending {
		*data = append(*data, '\n')
	}
	*data = append(*data, value...)
	*pending = true
}

// chunk is what the stream reader needs of one event.
type chunk struct {
	Choices []struct {
		Text  string `json:"text"`
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
	} `json:"choices"`
	Usage *usage `json:"usage"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// dispatch applies one event's data.
func (s *Stream) dispatch(data []byte, now func() time.Time) error {
	if s.Done {
		return errors.New("an event follows data: [DONE]")
	}
	if string(data) == "[DONE]" {
		s.Done = true
		return nil
	}
	var c chunk
	if err := json.Unmarshal(data, &c); err != nil {
		return fmt.Errorf("an event's data is not a JSON chunk (%v): %q", err, truncate(data))
	}
	if c.Error != nil {
		return fmt.Errorf("the server reported an error in the stream: %s", c.Error.Message)
	}
	if len(c.Choices) > 0 && c.Choices[0].Text+c.Choices[0].Delta.Content != "" {
		s.Tokens = append(s.Tokens, now())
	}
	if c.Usage != nil {
		s.CompletionTokens = c.Usage.CompletionTokens
	}
	return nil
}

// readLine reads one line without its "\n" or "\r\n"; at the end of the stream it returns
// what is left with io.EOF.
func readLine(br *bufio.Reader) ([]byte, error) {
	var long []byte
	for {
		part, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			if len(long)+len(part) > maxLine {
				return nil, errLineTooLong
			}
			long = append(long, part...)
			continue
		}
		line := part
		if long != nil {
			line = append(long, part...)
		}
		if len(line) > maxLine {
			return nil, errLineTooLong
		}
		if err != nil {
			return bytes.TrimSuffix(line, []byte("\r")), err
		}
		line = bytes.TrimSuffix(line[:len(line)-1], []byte("\r"))
		return line, nil
	}
}
