"""trainguard.policy"""
