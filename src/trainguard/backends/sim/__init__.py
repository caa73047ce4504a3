"""trainguard.backends.sim"""
