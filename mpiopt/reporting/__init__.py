"""See a study: an offline HTML report (plotly), static figures (matplotlib), a trace.

    figures.py    what each plot shows (data only), shared by both renderers
    importance.py fANOVA-style parameter importance on a random forest
    timeline.py   group intervals, idle time, efficiency
    view.py       the study as the plots see it: parameter axes, hover text, Panel
    html.py       `mpiopt report`: one self-contained page
    plotly_figures.py  Panels drawn as plotly figures (JSON) for that page
    static.py     `mpiopt plot`: PNG/SVG with matplotlib (Agg)
    trace.py      `mpiopt export --format chrome-trace`: Chrome Trace Event JSON

Everything here takes StudyRecord/FrozenTrial values; plotly, matplotlib and
scikit-learn are imported only when a figure is made.
"""
