"""What every layer of nsq shares and no user imports (as Go's ``internal/``):
Go durations (:mod:`.durations`), ``host:port`` addresses (:mod:`.addresses`),
Go-style logging (:mod:`.logs`), the data-path lock (:mod:`.dirlock`),
socket errors in plain words (:mod:`.neterrors`)."""
