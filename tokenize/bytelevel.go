package tokenize

// byteToRune is GPT-2's bytes-to-unicode table used by byte-level BPE vocabularies: printable
// bytes stand for themselves, the others for the code points 256, 257, ... in byte order.
var byteToRune = func() [256]rune {
	var t [256]rune
	n := rune(0)
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			t[b] = rune(b)
		} else {
			t[b] = 256 + n
			n++
		}
	}
	return t
}()

// runeToByte inverts byteToRune; ok is false for a rune outside the byte-level alphabet.
func runeToByte(r rune) (byte, bool) {
	switch {
	case (r >= '!' && r <= '~') || (r >= 0xA1 && r <= 0xAC) || (r >= 0xAE && r <= 0xFF):
		return byte(r), true
	case r >= 256 && r < 256+68:
		for b, m := range byteToRune {
			if m == r {
				return byte(b), true
			}
		}
	}
	return 0, false
}

// fromByteLevel converts a vocabulary token written in the byte-level alphabet to its raw bytes.
func fromByteLevel(tok string) (string, bool) {
	out := make([]byte, 0, len(tok))
	for _, r := range tok {
		b, ok := runeToByte(r)
		if !ok {
			return "", false
		}
		out = append(out, b)
	}
	return string(out), true
}
