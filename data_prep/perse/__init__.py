"""PerSE's pipeline: raw MPST / DOC / Amazon records to Per-MPST, Per-DOC and Amazon instruction datasets."""
