package textenc

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Text clean-up and splitting, as SimpleTokenizer.encode does them in Python:
//
//	text = whitespace_clean(basic_clean(text)).lower()
//	words = regex.findall(pat, text)
//
// The places where Go and Python differ are handled here: Python's
// str.isspace (strip) counts U+001C..U+001F as space but the regex \s does
// not; Go's regexp \s is ASCII-only while Python's is Unicode White_Space,
// which is unicode.IsSpace; str.lower maps "İ" to two code points and a
// final capital sigma to "ς".

// cleanText appends to dst the cleaned, lower-cased text: HTML unescaped
// twice, stripped, runs of white space made one space, lower-cased.
func cleanText(dst []byte, s string) []byte {
	if strings.IndexByte(s, '&') >= 0 {
		s = unescapeHTML(unescapeHTML(s))
	}
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return cleanUnicode(dst, s)
		}
	}
	// ASCII: strip, collapse and lower-case in one pass.
	start, end := 0, len(s)
	for start < end && isPySpaceASCII(s[start]) {
		start++
	}
	for end > start && isPySpaceASCII(s[end-1]) {
		end--
	}
	space := false
	for i := start; i < end; i++ {
		c := s[i]
		if isSpaceASCII(c) {
			if !space {
				dst = append(dst, ' ')
			}
			space = true
			continue
		}
		space = false
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		dst = append(dst, c)
	}
	return dst
}

// isSpaceASCII reports whether c matches \s in Python's regex module.
func isSpaceASCII(c byte) bool {
	return c == ' ' || '\t' <= c && c <= '\r'
}

// isPySpaceASCII reports whether Python's str.isspace holds for c.
func isPySpaceASCII(c byte) bool {
	return isSpaceASCII(c) || 0x1c <= c && c <= 0x1f
}

func isPySpace(r rune) bool {
	return unicode.IsSpace(r) || 0x1c <= r && r <= 0x1f
}

// cleanUnicode is cleanText for text that is not all ASCII.
func cleanUnicode(dst []byte, s string) []byte {
	runes := make([]rune, 0, len(s))
	for _, r := range s { // an invalid byte gives U+FFFD
		runes = append(runes, r)
	}
	start, end := 0, len(runes)
	for start < end && isPySpace(runes[start]) {
		start++
	}
	for end > start && isPySpace(runes[end-1]) {
		end--
	}
	// Collapse white space in place.
	n, space := 0, false
	for i := start; i < end; i++ {
		r := runes[i]
		if unicode.IsSpace(r) {
			if space {
				continue
			}
			r = ' '
		}
		space = r == ' '
		runes[n] = r
		n++
	}
	runes = runes[:n]
	for i, r := range runes {
		switch r {
		case 'İ': // Python: "i" + COMBINING DOT ABOVE
			dst = append(dst, 'i')
			dst = utf8.AppendRune(dst, '\u0307')
		case 'Σ':
			if finalSigma(runes, i) {
				dst = utf8.AppendRune(dst, 'ς')
			} else {
				dst = utf8.AppendRune(dst, 'σ')
			}
		default:
			dst = utf8.AppendRune(dst, unicode.ToLower(r))
		}
	}
	return dst
}

// finalSigma reports whether the capital sigma at s[i] ends a word in the
// sense of Unicode's Final_Sigma condition, as Python's str.lower tests it:
// a cased letter before it and none after it, skipping case-ignorable
// characters on both sides.
func finalSigma(s []rune, i int) bool {
	j := i - 1
	for j >= 0 && isCaseIgnorable(s[j]) {
		j--
	}
	if j < 0 || !isCased(s[j]) {
		return false
	}
	j = i + 1
	for j < len(s) && isCaseIgnorable(s[j]) {
		j++
	}
	return j == len(s) || !isCased(s[j])
}

// isCased is Unicode's Cased property.
func isCased(r rune) bool {
	return unicode.IsUpper(r) || unicode.IsLower(r) || unicode.IsTitle(r) ||
		unicode.Is(unicode.Other_Lowercase, r) || unicode.Is(unicode.Other_Uppercase, r)
}

// isCaseIgnorable is Unicode's Case_Ignorable property: marks, format
// characters, modifiers, and the word-break classes MidLetter, MidNumLet and
// Single_Quote.
func isCaseIgnorable(r rune) bool {
	switch r {
	case '\'', '.', ':', '·', '\u0387', '\u055F', '\u05F4', '\u2018', '\u2019', '\u2024',
		'\u2027', '\uFE13', '\uFE52', '\uFE55', '\uFF07', '\uFF0E', '\uFF1A':
		return true
	}
	return unicode.In(r, unicode.Mn, unicode.Me, unicode.Cf, unicode.Lm, unicode.Sk)
}

// Character classes of CLIP's split pattern.
const (
	classSkip   = iota // white space, and what no alternative matches
	classLetter        // \p{L}
	classNumber        // \p{N}
	classOther         // [^\s\p{L}\p{N}]
)

func runeClass(r rune) int {
	if r < utf8.RuneSelf {
		c := byte(r)
		switch {
		case 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z':
			return classLetter
		case '0' <= c && c <= '9':
			return classNumber
		case isSpaceASCII(c):
			return classSkip
		}
		return classOther
	}
	switch {
	case unicode.IsSpace(r):
		return classSkip
	case unicode.IsLetter(r):
		return classLetter
	case unicode.IsNumber(r):
		return classNumber
	case r == '\u0345':
		// COMBINING GREEK YPOGEGRAMMENI (a mark) case-folds to the letter ι,
		// so under IGNORECASE it matches neither [\p{L}] nor
		// [^\s\p{L}\p{N}]; the regex skips it like white space.
		return classSkip
	}
	return classOther
}

func decodeRune(s []byte) (rune, int) {
	if c := s[0]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRune(s)
}

// contractions are the pattern's "'s|'t|'re|'ve|'m|'ll|'d", tried in order.
var contractions = [...]string{"'s", "'t", "'re", "'ve", "'m", "'ll", "'d"}

// nextWord returns the span of the first match at or after i of CLIP's
// pattern, compiled with IGNORECASE:
//
//	<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+
//
// The alternatives are tried in order at each position (leftmost-first, as
// in Python). start == end means no match is left.
func nextWord(s []byte, i int) (start, end int) {
	for i < len(s) {
		r, size := decodeRune(s[i:])
		switch r {
		case '<':
			if n := matchFold(s[i:], sotText); n > 0 {
				return i, i + n
			}
			if n := matchFold(s[i:], eotText); n > 0 {
				return i, i + n
			}
		case '\'':
			for _, c := range contractions {
				if n := matchFold(s[i:], c); n > 0 {
					return i, i + n
				}
			}
		}
		switch runeClass(r) {
		case classSkip:
			i += size
			continue
		case classNumber:
			return i, i + size
		case classLetter:
			end = i + size
			for end < len(s) {
				r, size := decodeRune(s[end:])
				if runeClass(r) != classLetter {
					break
				}
				end += size
			}
			return i, end
		default:
			end = i + size
			for end < len(s) {
				r, size := decodeRune(s[end:])
				if runeClass(r) != classOther {
					break
				}
				end += size
			}
			return i, end
		}
	}
	return len(s), len(s)
}

// matchFold returns the length of the prefix of s that equals the ASCII
// literal lit under simple case folding (so "s" also matches "ſ" and "S"), or
// 0 if there is none.
func matchFold(s []byte, lit string) int {
	n := 0
	for k := 0; k < len(lit); k++ {
		if n >= len(s) {
			return 0
		}
		r, size := decodeRune(s[n:])
		if c := rune(lit[k]); r != c && !foldsTo(r, c) {
			return 0
		}
		n += size
	}
	return n
}

// foldsTo reports whether r is in the simple case-folding orbit of c.
func foldsTo(r, c rune) bool {
	for f := unicode.SimpleFold(c); f != c; f = unicode.SimpleFold(f) {
		if f == r {
			return true
		}
	}
	return false
}

// decodeUTF8Replace converts b to a string, replacing each maximal invalid
// subsequence with one U+FFFD, which is what Python's
// bytes.decode("utf-8", errors="replace") does. (strings.ToValidUTF8 would
// join adjacent invalid sequences into one U+FFFD.)
func decodeUTF8Replace(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var out strings.Builder
	out.Grow(len(b) + 8)
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		if r != utf8.RuneError || size > 1 {
			out.Write(b[:size])
			b = b[size:]
			continue
		}
		out.WriteRune(utf8.RuneError)
		b = b[invalidPrefixLen(b):]
	}
	return out.String()
}

// invalidPrefixLen returns the length of the maximal subpart at the start of
// b, which does not begin with a valid UTF-8 sequence: the lead byte and the
// continuation bytes that still fit a well-formed sequence (Unicode 3.9,
// U+FFFD substitution of maximal subparts).
func invalidPrefixLen(b []byte) int {
	var want int
	lo, hi := byte(0x80), byte(0xBF)
	switch c := b[0]; {
	case 0xC2 <= c && c <= 0xDF:
		want = 2
	case c == 0xE0:
		want, lo = 3, 0xA0
	case c == 0xED:
		want, hi = 3, 0x9F
	case 0xE1 <= c && c <= 0xEF:
		want = 3
	case c == 0xF0:
		want, lo = 4, 0x90
	case c == 0xF4:
		want, hi = 4, 0x8F
	case 0xF1 <= c && c <= 0xF3:
		want = 4
	default:
		return 1
	}
	n := 1
	if n < len(b) && lo <= b[n] && b[n] <= hi {
		n++
		for n < want && n < len(b) && 0x80 <= b[n] && b[n] <= 0xBF {
			n++
		}
	}
	return n
}
