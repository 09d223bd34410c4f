"""The Streamlit app: AppTest and a real browser."""
