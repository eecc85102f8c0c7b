// Package agents holds the tests that drive macpool with the official
// clients and coding agents of the two agent protocols: the openai and
// @anthropic-ai/sdk npm clients against an in-process cluster, and the
// Codex CLI and Claude Code against a `macpool up` process on a
// random-weight model. The npm packages are pinned in package.json here
// (install with `npm ci` in this folder); the tests skip when node or the
// packages are missing unless MACPOOL_REQUIRE_AGENTS=1 (CI) makes that a
// failure.
package agents
