"""Tests for wordfreq (run: python3 test_wordfreq.py)."""

import unittest

from wordfreq import top_words


class TopWords(unittest.TestCase):
    def test_counts_and_orders(self):
        self.assertEqual(top_words("b a b c b a", 2), [("b", 3), ("a", 2)])

    def test_ignores_case_and_punctuation(self):
        self.assertEqual(top_words("Hi, hi! HI.", 1), [("hi", 3)])


if __name__ == "__main__":
    unittest.main()
