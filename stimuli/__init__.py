"""Stimulus preparation: pure image and design code (numpy/scipy/OpenCV/Pillow, no Flask).

Submodules are imported on demand so that ``import stimuli.designs`` stays cheap.
"""
