"""Answers in words: the sentence, the fleet answer, the verdict and the operating guidance."""
