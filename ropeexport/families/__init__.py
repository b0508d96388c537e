"""Encoding families, one package each (``families/<name>/``); ``ropeexport.catalog`` lists them.

Nothing is imported here: importing one family's spec must not load the others, nor torch.
"""
