"""Streamlit sizing app: ``streamlit run app.py``. It renders the capacity library; it computes nothing itself.

The page lives in ``app_views.main`` (Streamlit recompiles this file on every rerun; imported modules are
compiled once), the views in ``app_views.views.VIEWS``, the downloads in ``app_views.exports.EXPORTS``.
"""

from app_views.main import main

main()
