"""Images for agents that read screenshots, scans and charts (Pillow, imported lazily).

:mod:`.render` draws documents, charts and screenshots with their text
layers; :mod:`.edits` changes one box of an image and its layer in the same
step (paste a note, overwrite a value, erase a region, write an
instruction); :mod:`.backends` chooses how a region is repainted: Pillow
compositing by default, or diffusers inpainting (:mod:`.inpaint`, the
``vision`` extra).  Nothing here is imported by a run without images, and
torch / diffusers only by :mod:`.inpaint`.
"""
