package hub

import (
	"fmt"
	"regexp"
	"strings"
)

// Ref names a model on the Hub: a repo, a revision and optionally one file
// (or quantisation tag) to pick among the repo's GGUF files.
//
// Grammar: [hf.co/ | huggingface.co/ | https://huggingface.co/ | hf://]ORG/NAME[@REVISION][:FILE]
//
//	Qwen/Qwen3-0.6B                       branch main, safetensors
//	Qwen/Qwen3-0.6B@refs/pr/4             a PR ref (any branch, tag or commit)
//	Qwen/Qwen3-8B-GGUF:Qwen3-8B-Q4_K_M.gguf  one GGUF file, by exact path
//	Qwen/Qwen3-8B-GGUF:Q4_K_M             one GGUF file, by quantisation tag
//	Qwen/Qwen3-8B-GGUF@main:q8_0          both
//
// ':' cannot occur in a repo name or a git ref, so the file selector is
// everything after the first ':'; '@' cannot occur in a repo name, so the
// revision is what lies between the first '@' and the ':'.
type Ref struct {
	Repo     string // "Qwen/Qwen3-0.6B"
	Revision string // branch, tag or 40-hex commit; "main" when not given
	File     string // GGUF file path or quantisation tag; "" = pick automatically
}

// String gives the ref back in the grammar ParseRef reads.
func (r Ref) String() string {
	s := r.Repo
	if r.Revision != "" && r.Revision != DefaultRevision {
		s += "@" + r.Revision
	}
	if r.File != "" {
		s += ":" + r.File
	}
	return s
}

// DefaultRevision is the revision used when a ref names none.
const DefaultRevision = "main"

var (
	repoPattern   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$`)
	commitPattern = regexp.MustCompile(`^[0-9a-f]{40}$`)
	refPrefixes   = []string{"https://huggingface.co/", "http://huggingface.co/", "huggingface.co/", "hf.co/", "hf://"}
)

// ParseRef parses a Hub model reference (see Ref). It does not look at the
// file system: Resolve checks for a local path first.
func ParseRef(s string) (Ref, error) {
	orig := s
	for _, p := range refPrefixes {
		if strings.HasPrefix(s, p) {
			s = strings.TrimPrefix(s, p)
			break
		}
	}
	var r Ref
	if i := strings.IndexByte(s, ':'); i >= 0 {
		s, r.File = s[:i], s[i+1:]
		if r.File == "" {
			return Ref{}, fmt.Errorf("model %q: empty file after ':'", orig)
		}
		if !safeRelPath(r.File) {
			return Ref{}, fmt.Errorf("model %q: file %q must be a relative path inside the repo", orig, r.File)
		}
	}
	if i := strings.IndexByte(s, '@'); i >= 0 {
		s, r.Revision = s[:i], s[i+1:]
		if r.Revision == "" {
			return Ref{}, fmt.Errorf("model %q: empty revision after '@'", orig)
		}
		if !safeRelPath(r.Revision) {
			return Ref{}, fmt.Errorf("model %q: revision %q is not a valid git ref", orig, r.Revision)
		}
	} else {
		r.Revision = DefaultRevision
	}
	if !repoPattern.MatchString(s) || strings.Contains(s, "..") || strings.HasSuffix(s, ".git") {
		return Ref{}, fmt.Errorf("model %q is not a Hugging Face repo id (ORG/NAME[@REVISION][:FILE])", orig)
	}
	r.Repo = s
	return r, nil
}

// safeRelPath reports whether p is a relative slash-separated path without
// "." or ".." elements, so that it cannot escape the cache folder it is
// joined to.
func safeRelPath(p string) bool {
	if p == "" || strings.HasPrefix(p, "/") || strings.Contains(p, "\\") || strings.ContainsRune(p, 0) {
		return false
	}
	for _, el := range strings.Split(p, "/") {
		if el == "" || el == "." || el == ".." {
			return false
		}
	}
	return true
}
