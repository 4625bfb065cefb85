/* The recover confirmation, enhanced: the confirm button names the chosen
   disposition ("Mark #7 FAILED", "Abandon #7"), each row shows only what the
   chosen disposition does, and the failure category is disabled (so not
   posted) with ABANDON, which records none. Without the script the page still
   works: the button reads "Apply the chosen disposition to #7", every row
   shows both outcomes, and the server refuses a category with ABANDON. */
(function () {
  "use strict";
  var form = document.querySelector("form.ob-confirm-form");
  if (!form) {
    return;
  }
  var button = form.querySelector("#confirm");
  var category = form.querySelector("#id_failure_category");
  var override = form.querySelector("#id_override");
  var disposition = form.querySelector("#id_disposition");

  function chosen() {
    return disposition ? disposition.value : "";
  }

  function labels() {
    var name = "data-labels";
    if (override && override.checked && button.hasAttribute("data-labels-override")) {
      name = "data-labels-override";
    }
    try {
      return JSON.parse(button.getAttribute(name) || "{}");
    } catch (error) {
      return {};
    }
  }

  function update() {
    var value = chosen();
    if (category) {
      category.disabled = value === "ABANDON";
    }
    var outcomes = form.querySelectorAll("[data-disposition]");
    for (var i = 0; i < outcomes.length; i += 1) {
      outcomes[i].hidden = value !== "" && outcomes[i].getAttribute("data-disposition") !== value;
    }
    if (button) {
      var text = labels()[value];
      if (text) {
        button.value = text;
      }
    }
  }

  form.addEventListener("change", update);
  update();
})();
