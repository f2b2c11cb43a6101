"""The farm dashboard: `farm dashboard` runs this script with Streamlit (FARM_RESULTS names
the warehouse). Each page is a script under views/; data.py computes what they show."""

from pathlib import Path

import streamlit as st

PAGES = Path(__file__).parent / "views"  # not "pages/": Streamlit would list that folder by itself


def main() -> None:
    st.set_page_config(page_title="farm", layout="wide")
    navigation = st.navigation([
        st.Page(PAGES / "overview.py", title="Overview", default=True),
        st.Page(PAGES / "compare.py", title="Compare"),
        st.Page(PAGES / "cell.py", title="Cell"),
        st.Page(PAGES / "diff.py", title="Diff"),
        st.Page(PAGES / "regressions.py", title="Regressions"),
        st.Page(PAGES / "history.py", title="History"),
        st.Page(PAGES / "sql.py", title="SQL"),
    ])
    navigation.run()


if __name__ == "__main__":  # Streamlit runs this file as __main__; importing it does nothing
    main()
