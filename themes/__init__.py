"""distconsole's Textual themes, one ``<name>.toml`` per theme (installed as ``console.themes``)."""
