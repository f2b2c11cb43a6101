"""The comparison dashboard (Streamlit, `farm dashboard`) and the static report (`farm report`).

data.py computes every comparison from the warehouse with no Streamlit import, so the report
and the tests use it directly; sql.py is the read-only console; app.py and views/ are the
Streamlit scripts.
"""

RESULTS_ENV = "FARM_RESULTS"  # `farm dashboard --results DIR` hands the folder to the app in this variable
