"""Count the most frequent words of a text file."""

import collections
import re
import sys

WORD = re.compile(r"[a-z']+")


def top_words(text, n=10):
    """The n most common words of text, lowercased, most common first."""
    counts = collections.Counter(WORD.findall(text.lower()))
    return counts.most_common(n)


def main(argv):
    if len(argv) != 2:
        print("usage: wordfreq.py FILE", file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as f:
        for word, count in top_words(f.read()):
            print(f"{count:6} {word}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
