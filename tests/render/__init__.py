"""Reports: JSON, CSV, XLSX (with LibreOffice), the customer's HTML and engine flags."""
