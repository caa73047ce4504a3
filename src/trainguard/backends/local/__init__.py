"""trainguard.backends.local"""
