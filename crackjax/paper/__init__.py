"""Reproducing the paper: `tables` (Tables I-VIII as data, their rows and settings), `runner`
(``python -m crackjax.paper.runner``: rows x seeds, resumable, side by side), `plan` (which jobs
fit a chunk of GPU time) and `report` (``python -m crackjax.paper.report``: the re-run tables
beside the paper's; its numbers and Welch tests in `report_stats`, its Markdown and CSV tables in
`report_tables`, its curves in `report_figures`)."""
