package textenc

import (
	"html"
	"strings"
	"unicode/utf8"
)

// unescapeHTML replaces character references as Python's html.unescape does.
//
// Go's html.UnescapeString knows the same HTML5 entity names (all but
// &nGt; and &nLt;) and finds the same longest legacy prefix ("&ampx" is
// "&x"), so named references are handed to it one at a time. Numeric references are decoded here because
// the two differ there: Python drops control and non-character code points
// (&#1; is ""), decodes "&#9" at the very end of the text, and saturates
// huge numbers to U+FFFD.
func unescapeHTML(s string) string {
	i := strings.IndexByte(s, '&')
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i >= 0 {
		b.WriteString(s[:i])
		s = s[i:]
		n, repl := charRef(s)
		if n == 0 {
			b.WriteByte('&')
			s = s[1:]
		} else {
			b.WriteString(repl)
			s = s[n:]
		}
		i = strings.IndexByte(s, '&')
	}
	b.WriteString(s)
	return b.String()
}

// charRef matches Python's pattern
//
//	&(#[0-9]+;?|#[xX][0-9a-fA-F]+;?|[^\t\n\f <&#;]{1,32};?)
//
// at the start of s (which begins with '&') and returns the length of the
// match and its replacement; n == 0 when there is no match.
func charRef(s string) (n int, repl string) {
	if len(s) < 2 {
		return 0, ""
	}
	if s[1] == '#' {
		return numericRef(s)
	}
	// A name: up to 32 characters outside "\t\n\f <&#;", then an optional ';'.
	end, count := 1, 0
	for end < len(s) && count < 32 {
		c := s[end]
		if c == '\t' || c == '\n' || c == '\f' || c == ' ' || c == '<' || c == '&' || c == '#' || c == ';' {
			break
		}
		_, size := utf8.DecodeRuneInString(s[end:])
		end += size
		count++
	}
	if count == 0 {
		return 0, ""
	}
	if end < len(s) && s[end] == ';' {
		end++
	}
	// The two HTML5 entities that Go's table lacks.
	switch s[:end] {
	case "&nGt;":
		return end, "≫⃒"
	case "&nLt;":
		return end, "≪⃒"
	}
	return end, html.UnescapeString(s[:end])
}

func numericRef(s string) (n int, repl string) {
	i, base := 2, 10
	if i < len(s) && (s[i] == 'x' || s[i] == 'X') {
		i, base = 3, 16
	}
	start := i
	num := 0
	for ; i < len(s); i++ {
		d := digitValue(s[i], base)
		if d < 0 {
			break
		}
		if num <= utf8.MaxRune {
			num = num*base + d // stops growing once past the largest code point
		}
	}
	if i == start {
		return 0, ""
	}
	if i < len(s) && s[i] == ';' {
		i++
	}
	return i, codePointText(num)
}

func digitValue(c byte, base int) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case base == 16 && 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	case base == 16 && 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// codePointText is the text of a numeric reference to num, per Python's
// html._replace_charref.
func codePointText(num int) string {
	switch {
	case num == 0:
		return "\uFFFD"
	case num == 0x0D:
		return "\r"
	case 0x80 <= num && num <= 0x9F:
		return windows1252[num-0x80]
	case 0xD800 <= num && num <= 0xDFFF || num > utf8.MaxRune:
		return "\uFFFD"
	case 0x01 <= num && num <= 0x08, num == 0x0B, 0x0E <= num && num <= 0x1F, num == 0x7F,
		0xFDD0 <= num && num <= 0xFDEF, num&0xFFFE == 0xFFFE:
		return "" // control characters and non-characters
	}
	return string(rune(num))
}

// windows1252 is what HTML5 makes of the references &#x80; to &#x9F;: the
// Windows-1252 character, or the C1 control itself where that code page has
// none.
var windows1252 = [32]string{
	"\u20AC", "\u0081", "\u201A", "\u0192", "\u201E", "\u2026", "\u2020", "\u2021",
	"\u02C6", "\u2030", "\u0160", "\u2039", "\u0152", "\u008D", "\u017D", "\u008F",
	"\u0090", "\u2018", "\u2019", "\u201C", "\u201D", "\u2022", "\u2013", "\u2014",
	"\u02DC", "\u2122", "\u0161", "\u203A", "\u0153", "\u009D", "\u017E", "\u0178",
}
