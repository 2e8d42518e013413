"""A road survey over crackjax-predict's outputs (docs/prediction.md#a-road-survey).

Where each photo was taken (`gps`: its EXIF's GPS, or a sidecar CSV), one point per photo in
``survey.geojson`` (`geojson`), per road section in ``sections.csv`` (`sections`), the survey's
page with its map (`survey_page`), the tables' ``lat`` and ``lon`` columns (`survey_tables`)
and the command ``crackjax-survey`` (`survey_command`); predicted masks to COCO files for a
labelling tool and corrected labels back (`coco`, ``crackjax-labels``: `labels_command`); a
prediction split into shards, here or as SLURM array tasks, and merged (`shards`). It sits
above ``deploy/`` (whose outputs it reads) and ``paper/`` (whose SLURM executor it uses).
"""
