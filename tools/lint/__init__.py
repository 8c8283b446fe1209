"""Config lint: a vLLM serving configuration checked against a release and the knowledge base."""
