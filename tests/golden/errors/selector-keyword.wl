workload keywords {
  session s { user "hi"; reply 4 label first; user "more"; reply 4 label again }
  gates { a: overall count(ok{first, warm}) >= 1 }
}
