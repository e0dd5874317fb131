// django-blamequeue console: a bulk action carries on with its next batch by itself.
(function () {
  "use strict";
  var next = document.getElementById("bq-bulk-next");
  if (next) { next.submit(); }
})();
