"""Stage 4, output: the report as its readers get it.

`render` writes the files of a report build (CSV, report.json through `reportdoc`, the HTML page with its
`svgplot` charts, the Prometheus textfile through `prom`); `show` prints a built report in a terminal;
`economics_render` and `gpuuse_render` are the unit economics' and GPU use's parts of the page and textfile.
"""
