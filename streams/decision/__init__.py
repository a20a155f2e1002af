"""The write side's decision rules: the state deciders consult, its fold, and the deciders."""
