"""HTTP adapter: aiohttp routes that decode, call the Scheduler, encode. No decisions here."""
