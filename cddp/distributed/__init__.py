from .store import TCPStore, FileStore, PrefixStore, HashStore, Store
