"""`farm report`: one sweep's comparisons as a static, self-contained HTML file (`html`), made from
the dashboard's data layer (farm.dashboard.data, summary, layers) without Streamlit."""
