#!/usr/bin/env python3
"""Lists the product functions longer than a limit (default 100 lines), longest
first, as `file:line  length  name`. Product means the workspace crates' `src/`
(and `build.rs`), without `#[cfg(test)]` items, `#[test]` functions, the e2e
crate (`tests/`), integration tests (`*/tests/`), benches, examples, fuzz targets and the
vendored parser. Length counts from the `fn` line to its closing brace.

    python3 scripts/long-functions.py [--limit N] [--allow FILE] [ROOT]

`--allow FILE` names functions allowed to stay long (data tables), one
`path::name` a line, `#` comments allowed; they are listed apart and do not
count. The exit status is 1 when any other function is over the limit.
"""
import os
import re
import sys

SKIP_DIRS = {"target", "vendor", "fuzz", "tests", "benches", "examples", ".git", "node_modules"}


def strip(src):
    """Returns src with comments and the contents of string and char literals
    blanked (newlines kept), so braces can be counted."""
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        elif re.match(r"b?r#*\"", src[i:i + 260]) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            m = re.match(r"(b?r)(#*)\"", src[i:])
            close = '"' + m.group(2)
            j = src.find(close, i + len(m.group(0)))
            j = n if j < 0 else j + len(close)
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            j += 1
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        elif c == "'":
            # A char literal ('x', '\n', '\u{..}') or a lifetime ('a).
            if i + 1 < n and src[i + 1] == "\\":
                j = src.find("'", i + 2)
                j = n if j < 0 else j + 1
            elif i + 2 < n and src[i + 2] == "'":
                j = i + 3
            else:
                j = i + 1
            out.append(" " * (j - i) if j > i + 1 else c)
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def block_end(text, start):
    """Index just after the brace block that opens at text[start] == '{'."""
    depth = 0
    for j in range(start, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return j + 1
    return len(text)


def body_start(text, i):
    """Index of the `{` opening the body of the item whose keyword is at i, or
    None for a declaration without body (`;` first)."""
    paren = 0
    for j in range(i, len(text)):
        ch = text[j]
        if ch in "([":
            paren += 1
        elif ch in ")]":
            paren -= 1
        elif paren == 0 and ch == ";":
            return None
        elif paren == 0 and ch == "{":
            return j
    return None


ATTR_TEST = re.compile(r"#\[\s*(cfg\s*\(\s*test\s*\)|test|tokio::test[^\]]*)\s*\]")


def test_spans(text):
    """Spans of items under #[cfg(test)] / #[test]."""
    spans = []
    for m in ATTR_TEST.finditer(text):
        # The item the attribute belongs to: the next `mod`/`fn`/`impl` keyword.
        k = re.compile(r"\b(mod|fn|impl)\b").search(text, m.end())
        if not k:
            continue
        b = body_start(text, k.start())
        if b is not None:
            spans.append((m.start(), block_end(text, b)))
    return spans


FN = re.compile(r"\bfn\s+([A-Za-z_][A-Za-z0-9_]*)")


def long_functions(path, limit):
    src = open(path, encoding="utf-8").read()
    text = strip(src)
    skip = test_spans(text)
    found = []
    for m in FN.finditer(text):
        if any(a <= m.start() < b for a, b in skip):
            continue
        b = body_start(text, m.end())
        if b is None:
            continue
        end = block_end(text, b)
        first = text.count("\n", 0, m.start()) + 1
        last = text.count("\n", 0, end - 1) + 1
        length = last - first + 1
        if length > limit:
            found.append((length, path, first, m.group(1)))
    return found


def product_files(root):
    for dirpath, dirs, files in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        if rel == ".":
            # The e2e crate is test code from top to bottom.
            dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
        else:
            dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith(".")]
        for f in files:
            if f.endswith(".rs"):
                yield os.path.relpath(os.path.join(dirpath, f), root)


def main():
    args = sys.argv[1:]
    limit, allow_file, root = 100, None, "."
    while args:
        a = args.pop(0)
        if a == "--limit":
            limit = int(args.pop(0))
        elif a == "--allow":
            allow_file = args.pop(0)
        else:
            root = a
    allowed = set()
    if allow_file:
        for line in open(allow_file, encoding="utf-8"):
            line = line.split("#", 1)[0].strip()
            if line:
                allowed.add(line)
    found = []
    for f in product_files(root):
        found.extend(long_functions(os.path.join(root, f), limit))
    found.sort(key=lambda t: (-t[0], t[1], t[2]))
    over = [t for t in found if f"{os.path.relpath(t[1], root)}::{t[3]}" not in allowed]
    tables = [t for t in found if t not in over]
    for length, path, line, name in over:
        print(f"{os.path.relpath(path, root)}:{line}\t{length}\t{name}")
    for length, path, line, name in tables:
        print(f"{os.path.relpath(path, root)}:{line}\t{length}\t{name}\t(allowed: data table)")
    print(f"{len(over)} function(s) over {limit} lines, {len(tables)} allowed data table(s)", file=sys.stderr)
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
