"""The text the command-line tests train on: TEXT, the opening of A Tale of Two Cities thirty times (1,590
characters of 20 distinct ones), which a tiny model trains on for a few steps in well under a second. The
`workdir` fixture of tests/conftest.py puts it in text.txt."""

TEXT = "It was the best of times, it was the worst of times.\n" * 30
