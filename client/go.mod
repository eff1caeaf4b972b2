module github.com/oncepay/oncepay/client

go 1.26.8
