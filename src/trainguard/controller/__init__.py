"""trainguard.controller"""
