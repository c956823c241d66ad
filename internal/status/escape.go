package status

import (
	"fmt"
	"reflect"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Escape returns s safe to print on a terminal: every control character
// (C0, DEL and C1, so also ESC, BEL, CR and LF), every bidirectional
// formatting character, the Unicode line and paragraph separators and
// every byte that is not UTF-8 are written as Go escapes (\x1b, \r, \n,
// \u202e, \xff). A status document comes from the network, and a node, or
// whoever answers at its address, must not be able to move the cursor,
// clear the screen, retitle the window or forge a line of the output.
// Backslashes are kept as they are: an escape they seem to start prints
// as harmless text.
func Escape(s string) string {
	clean := true
	for _, r := range s {
		if unsafeRune(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x80 && unsafeRune(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case unsafeRune(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// unsafeRune reports whether r must not reach a terminal as it is.
// utf8.RuneError stands for a byte that is not UTF-8 (a real U+FFFD is
// escaped too, which is harmless).
func unsafeRune(r rune) bool {
	switch {
	case r == utf8.RuneError, unicode.IsControl(r):
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true // bidirectional formatting: reorders what follows
	case r == 0x2028, r == 0x2029:
		return true // line and paragraph separators
	}
	return false
}

// EscapeAll applies Escape to every string reachable from v, which must be
// a pointer (to a Doc, a Node's Doc, a slice of Verdicts ...): struct
// fields, slice and array elements and map values, through pointers. It
// is for text output; JSON output needs no escaping (encoding/json escapes
// control characters itself).
func EscapeAll(v any) {
	escapeValue(reflect.ValueOf(v))
}

func escapeValue(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			escapeValue(v.Elem())
		}
	case reflect.String:
		if v.CanSet() {
			v.SetString(Escape(v.String()))
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				escapeValue(v.Field(i))
			}
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			escapeValue(v.Index(i))
		}
	case reflect.Map:
		for _, k := range v.MapKeys() {
			e := reflect.New(v.Type().Elem()).Elem()
			e.Set(v.MapIndex(k))
			escapeValue(e)
			v.SetMapIndex(k, e)
		}
	}
}
