"""The experiments that join the stages: ``electra demo`` (the main job end to end),
``electra compare`` (RTD against MLM at equal compute) and ``electra report``.
"""
