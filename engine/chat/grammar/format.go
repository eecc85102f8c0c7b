package grammar

import (
	"sync"

	"github.com/macpool/macpool/engine/chat/regex"
)

// Formats enforced as regular languages. Each is a subset of what the
// format's RFC allows, chosen so that everything it accepts is valid for a
// strict validator (calendar-correct dates, no leap seconds, hostnames of
// at most 251 bytes, e-mail local parts of at most 62 bytes, URIs without
// ports or user info); some valid spellings are therefore refused.
const (
	reYear    = `[0-9]{4}`
	reMonthDy = `(?:(?:0[1-9]|1[0-2])-(?:0[1-9]|1[0-9]|2[0-8])|(?:0[13-9]|1[0-2])-(?:29|30)|(?:0[13578]|1[02])-31)`
	reLeap    = `(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)-02-29`
	reDate    = `(?:` + reYear + `-` + reMonthDy + `|` + reLeap + `)`
	reTime    = `(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]{1,9})?(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])`
	reDur     = `P(?:(?:[0-9]+Y(?:[0-9]+M)?(?:[0-9]+D)?|[0-9]+M(?:[0-9]+D)?|[0-9]+D)(?:T(?:[0-9]+H(?:[0-9]+M)?(?:[0-9]+S)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S))?|T(?:[0-9]+H(?:[0-9]+M)?(?:[0-9]+S)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S)|[0-9]+W)`
	reLabel   = `[A-Za-z0-9](?:[A-Za-z0-9-]{0,60}[A-Za-z0-9])?`
	reHost    = reLabel + `(?:\.` + reLabel + `){0,3}`
	reAtom    = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]{1,20}"
	reEmail   = reAtom + `(?:\.` + reAtom + `){0,2}@` + reHost
	reOctet   = `(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])`
	reIPv4    = reOctet + `(?:\.` + reOctet + `){3}`
	reH16     = `[0-9A-Fa-f]{1,4}`
	reLS32    = `(?:` + reH16 + `:` + reH16 + `|` + reIPv4 + `)`
	reIPv6    = `(?:(?:` + reH16 + `:){6}` + reLS32 +
		`|::(?:` + reH16 + `:){5}` + reLS32 +
		`|(?:` + reH16 + `)?::(?:` + reH16 + `:){4}` + reLS32 +
		`|(?:(?:` + reH16 + `:){0,1}` + reH16 + `)?::(?:` + reH16 + `:){3}` + reLS32 +
		`|(?:(?:` + reH16 + `:){0,2}` + reH16 + `)?::(?:` + reH16 + `:){2}` + reLS32 +
		`|(?:(?:` + reH16 + `:){0,3}` + reH16 + `)?::` + reH16 + `:` + reLS32 +
		`|(?:(?:` + reH16 + `:){0,4}` + reH16 + `)?::` + reLS32 +
		`|(?:(?:` + reH16 + `:){0,5}` + reH16 + `)?::` + reH16 +
		`|(?:(?:` + reH16 + `:){0,6}` + reH16 + `)?::)`
	rePchar  = `(?:[A-Za-z0-9._~!$&'()*+,;=:@-]|%[0-9A-Fa-f]{2})`
	reQuery  = `(?:\?(?:` + rePchar + `|[/?])*)?(?:#(?:` + rePchar + `|[/?])*)?`
	rePath   = `(?:/` + rePchar + `*)*`
	reScheme = `[A-Za-z][A-Za-z0-9+.-]*`
	reURI    = reScheme + `:(?://(?:` + reHost + `)?` + rePath + `|/?(?:` + rePchar + `+` + rePath + `)?)` + reQuery
	reRelRef = `(?:` + reURI + `|(?://` + reHost + `)?` + rePath + reQuery + `|` + rePchar + `+` + rePath + reQuery + `)`
	reUUID   = `[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}`
)

var formatSources = map[string]string{
	"date-time":             reDate + `[Tt]` + reTime,
	"date":                  reDate,
	"time":                  reTime,
	"duration":              reDur,
	"email":                 reEmail,
	"idn-email":             reEmail,
	"hostname":              reHost,
	"idn-hostname":          reHost,
	"ipv4":                  reIPv4,
	"ipv6":                  reIPv6,
	"uri":                   reURI,
	"iri":                   reURI,
	"uri-reference":         reRelRef,
	"iri-reference":         reRelRef,
	"uuid":                  reUUID,
	"json-pointer":          `(?:/(?:[^~/]|~[01])*)*`,
	"relative-json-pointer": `(?:0|[1-9][0-9]*)(?:#|(?:/(?:[^~/]|~[01])*)*)`,
	"uri-template":          `(?:[^{}]|\{[A-Za-z0-9_.,:*%+#/;?&=-]+\})*`,
}

var (
	formatMu sync.Mutex
	formats  = map[string]*regex.Regex{}
)

// formatRegex returns the automaton of a known format, or nil.
func formatRegex(name string) *regex.Regex {
	src, ok := formatSources[name]
	if !ok {
		return nil
	}
	formatMu.Lock()
	defer formatMu.Unlock()
	if r, ok := formats[name]; ok {
		return r
	}
	r := regex.MustCompileFull(src)
	formats[name] = r
	return r
}
