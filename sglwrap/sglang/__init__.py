"""What the target SGLang release is, how it reads its command line, and what it will do with it."""
