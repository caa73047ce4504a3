"""trainguard.backends"""
