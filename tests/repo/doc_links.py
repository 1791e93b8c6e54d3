#!/usr/bin/env python3
"""doc_links.py: every relative link of the repository's markdown (README.md, CHANGELOG.md, docs/*.md, bench/**.md,
references/**.md) names a file or folder that exists, and every #anchor into a markdown file names one of its
headings. External links (http, https, mailto) are not fetched. Exit 1 listing the broken ones.
Usage: python3 tests/repo/doc_links.py [ROOT]
"""
import glob
import os
import re
import sys

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*```")


def anchors(path):
    out = set()
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"^#+\s+(.*)", line)
            if m:  # GitHub's slug: lower case, punctuation dropped, spaces to hyphens
                slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
                out.add(slug)
    return out


def check(root):
    files = ["README.md", "CHANGELOG.md"] + glob.glob("docs/*.md", root_dir=root)
    files += glob.glob("bench/**/*.md", root_dir=root, recursive=True)
    files += glob.glob("references/**/*.md", root_dir=root, recursive=True)
    broken = []
    for rel in sorted(set(files)):
        path = os.path.join(root, rel)
        if not os.path.isfile(path):
            continue
        in_code = False
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if FENCE.match(line):
                    in_code = not in_code
                    continue
                if in_code:
                    continue
                for target in LINK.findall(re.sub(r"`[^`]*`", "", line)):
                    if re.match(r"^[a-z]+:", target):
                        continue
                    file_part, _, anchor = target.partition("#")
                    dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
                    if not os.path.exists(dest):
                        broken.append(f"{rel}:{n}: {target}: no such file")
                    elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
                        broken.append(f"{rel}:{n}: {target}: no heading '{anchor}'")
    return broken


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "../..")
    broken = check(os.path.normpath(root))
    for b in broken:
        print(b)
    if broken:
        print(f"\n{len(broken)} broken link(s)")
        return 1
    print("doc links: all resolve")
    return 0


if __name__ == "__main__":
    sys.exit(main())
