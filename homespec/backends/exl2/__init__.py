"""The EXL2 backend (exllamav2): `backend.Exl2Backend`; loading and tree attention in their own modules. Importing
this package loads nothing heavy."""
