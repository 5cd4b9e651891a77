"""The fenced fast path of ingest: code that exists for speed only, each piece equal to a reference form.

`direct/` reads a sacct text dump straight from its bytes (the reference is the pyarrow reader in `text`),
`swar` parses fixed-shape fields eight bytes at a time (the reference is each field's vectorised parser in
`fields`), `tres_values` cuts one TRES value from a list (the reference is `tres_values.extract_regex`),
`sorting` sorts and groups integer keys without argsort, and `memory` sets the process's allocators.
"""
