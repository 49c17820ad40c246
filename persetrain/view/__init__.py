"""Reading runs back: ``persetrain view`` (a local web page of every judged example) and ``persetrain compare``.

* ``runs.py``: a run directory read back (examples, judgment records of either layout, metrics, plots);
* ``rows.py``: the examples of one or more runs joined by id, as the page's rows, and the filters over them;
* ``summary.py``: a run's metrics table and plots;
* ``app.py``: the FastAPI app the page talks to, ``serve`` and ``export_html`` (one self-contained file);
* ``compare.py``: two runs' metrics, B - A, with paired bootstrap intervals and paired tests;
* ``static/``: the page itself, plain HTML, CSS and JavaScript (no CDN: it works offline).
"""
