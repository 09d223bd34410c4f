"""Streamlit sizing app: ``streamlit run app.py``. It renders the capacity library; it computes nothing itself.

The page lives in ``app_views.main`` (Streamlit recompiles this file on every rerun; imported modules are
compiled once), the views in ``app_views.views.VIEWS``, the downloads in ``app_views.exports.EXPORTS``.
"""

# Streamlit runs this file as "__main__". The server's worker processes (app_views/server.py) start fresh ("spawn")
# and import this file again as "__mp_main__": they neither draw the page nor import it.
if __name__ == "__main__":
    from app_views.main import main

    main()
